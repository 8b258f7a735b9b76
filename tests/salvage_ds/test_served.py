"""The ``served`` sampler against a real vLLM server (vLLM's CPU build, in the venv ``scripts/vllm_env.sh`` makes)
on 127.0.0.1: one server for the module, started the way the stage starts it (``ServedSampler``, managed) and
stopped at the end (the last test kills it). A tiny Qwen3-VL with head_dim 32 (vLLM's CPU attention takes 32-512),
fine-tuned briefly, with a LoRA adapter on top, saved and loaded back as the stage gets it (base + ``adapter/``):
the policy Salvage-DS trains, whose base the server serves from that directory."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from pydantic import SecretStr

from rmsweb_kedro.models import processes
from rmsweb_kedro.models.serving import ServerConfig, ServerError, _request
from rmsweb_kedro.training.salvage_ds import SalvageDSParams, prepare_states, train_salvage_ds
from rmsweb_kedro.training.salvage_ds.inputs import continuation_logits
from rmsweb_kedro.training.salvage_ds.objective import token_logprobs
from rmsweb_kedro.training.sampling import HFSampler, SamplerConfig, ServedSampler
from tests.salvage_ds.conftest import loop_config

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
#: |log pi| difference between the trainer's forward and the server's, per served token (float32 on both sides;
#: vLLM applies the LoRA with its own kernels): measured ~1e-5 here, 0.012 at most before (DESIGN.md).
LOGPROB_TOLERANCE = 0.02


def vllm_python() -> str:
    """The vLLM venv's Python (``scripts/vllm_env.sh --path``), or skip saying how to make it."""
    found = subprocess.run(
        ["bash", str(ROOT / "scripts/vllm_env.sh"), "--path"], capture_output=True, text=True
    )
    if found.returncode != 0:
        pytest.skip(f"no vLLM venv: {found.stderr.strip()} (scripts/test.sh makes it)")
    return found.stdout.strip().splitlines()[-1]


def server_config(**changes) -> ServerConfig:
    """The managed CPU server: float32, 1 GiB of KV cache, positions enough for the toy prompts."""
    settings = dict(
        python=vllm_python(),
        dtype="float32",
        max_model_len=1024,
        max_lora_rank=8,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        # vLLM's CPU build crashes on a seeded request whose prefill is split (its CPU generator has no offset)
        extra_args=["--no-enable-chunked-prefill"],
        startup_timeout_s=300,
        request_timeout_s=60,
    )
    return ServerConfig(**(settings | changes))


def saved_and_loaded(directory: Path, lora_policy: tuple):
    """``lora_policy`` (tests/fixtures_model.py: :func:`lora_tiny` once a session) saved as the stages save a LoRA
    policy (modeling.save_checkpoint: base + ``adapter/``) and loaded back (modeling.load_model), as the salvage_ds
    node gets ``sft_model``."""
    from rmsweb_kedro.models.modeling import load_model, save_checkpoint

    model, processor, states, prompt = lora_policy
    save_checkpoint(model, processor, directory)
    loaded, processor = load_model({"path": str(directory)})
    return loaded, processor, states, prompt


@pytest.fixture(scope="module")
def policy(tmp_path_factory, lora_policy):
    return saved_and_loaded(tmp_path_factory.mktemp("policy") / "sft_model", lora_policy)


PARAMS = SalvageDSParams(mode="salvage_ds", group_size=4, max_new_tokens=16, temperature=1.0)


@pytest.fixture(scope="module")
def sampler(policy, tmp_path_factory):
    """The module's managed server, started as the stage starts it, serving the policy's adapter (version 1)."""
    model, processor, _, prompt = policy
    served = ServedSampler(server_config(), tmp_path_factory.mktemp("served"), processor, prompt, PARAMS)
    served.sync(model)
    yield served
    served.close()


def lora_b(model) -> list[torch.Tensor]:
    return [p for name, p in model.named_parameters() if "lora_B" in name]


def texts(groups) -> list[list[str]]:
    return [[s.text for s in g] for g in groups]


def test_the_server_samples_with_the_adapter_of_every_step(policy, sampler):
    model, processor, states, prompt = policy
    prepared = prepare_states(states[:4], processor, prompt)
    local = HFSampler(processor, prompt, PARAMS)
    served = sampler.sample(model, prepared, 1, greedy=True)
    assert sampler.version == 1 and sampler.adapter.endswith("-v1")
    # on the trained tiny checkpoint the served greedy groups are the in-process sampler's, token for token
    mine = local.sample(model, prepared, 1, greedy=True)
    assert texts(served) == texts(mine)
    assert [s.completion_ids for g in served for s in g] == [s.completion_ids for g in mine for s in g]
    reloads = sampler.reload_seconds
    sampler.sample(model, prepared, 1, greedy=True)  # the weights did not change: no reload, same version
    assert sampler.version == 1 and sampler.reload_seconds == reloads

    saved = [b.detach().clone() for b in lora_b(model)]
    torch.manual_seed(1)
    with torch.no_grad():  # an "optimizer step" that moves the adapter far
        for b in lora_b(model):
            b.add_(torch.randn_like(b))
    try:
        changed = sampler.sample(model, prepared, 1, greedy=True)
        assert sampler.version == 2 and sampler.adapter.endswith("-v2")
        assert texts(changed) != texts(served)  # the server now answers with the new adapter ...
        assert texts(changed) == texts(local.sample(model, prepared, 1, greedy=True))  # ... the trainer's
    finally:
        with torch.no_grad():
            for b, value in zip(lora_b(model), saved, strict=True):
                b.copy_(value)
    assert texts(sampler.sample(model, prepared, 1, greedy=True)) == texts(served)  # back: version 3
    assert sampler.version == 3 and not (sampler.work_dir / "adapters" / "v2").exists()  # old ones unloaded


def worst_logprob_gap(model, processor, samples, vision=None, image_token=None) -> float:
    """The largest |log pi| difference between the trainer's forward and the server's over served (state, sample)
    pairs."""
    with torch.no_grad():
        logits, targets, _ = continuation_logits(
            model.eval(),
            [state.prompt_ids for state, _ in samples],
            [s.completion_ids for _, s in samples],
            processor.tokenizer.pad_token_id,
            vision,
            image_token,
        )
        mine = token_logprobs(logits, targets)
    return max(
        abs(mine[row, t].item() - lp) for row, (_, s) in enumerate(samples) for t, lp in enumerate(s.logprobs)
    )


def test_the_trainer_recomputes_the_servers_log_probabilities(policy, sampler):
    model, processor, states, prompt = policy
    prepared = prepare_states(states, processor, prompt)
    groups = sampler.sample(model, prepared, 4)  # temperature 1: the server's log-probs are the model's own
    samples = [(state, s) for state, g in zip(prepared, groups, strict=True) for s in g]
    assert len(samples) == 32 and all(len(s.logprobs) == len(s.completion_ids) > 0 for _, s in samples)
    eos = processor.tokenizer.convert_tokens_to_ids(processor.tokenizer.eos_token)
    assert any(s.completion_ids[-1] == eos for _, s in samples)  # a finished reply keeps its end of turn
    worst = worst_logprob_gap(model, processor, samples)
    assert worst <= LOGPROB_TOLERANCE, f"trainer vs server log-prob differ by up to {worst:.4f}"
    assert len({tuple(s.completion_ids) for _, s in samples}) > 8  # sampled, not one greedy reply


#: The short runs' settings: salvage_ds (mu = 1) at a near-greedy temperature, one round, 3 steps of 2 states; no
#: state leaves the pool (saturation counts per process: the two-process run must draw the one-process run's states)
SHORT = PARAMS.model_copy(update={"temperature": 0.01, "max_rounds": 1, "saturation_draws": None})
SHORT_LOOP = dict(max_steps=3, batch_size=2, learning_rate=3e-2, save_every=0)


def short_run(policy, tmp_path, name: str, sampler_config: SamplerConfig, **loop):
    """A short run (``SHORT``, ``SHORT_LOOP`` with ``loop`` changes) from a copy of the policy."""
    import copy

    model, processor, states, prompt = policy
    torch.manual_seed(0)
    config = loop_config(tmp_path, name, **(SHORT_LOOP | loop))
    return train_salvage_ds(
        copy.deepcopy(model), processor, states, SHORT, config, prompt, sampler=sampler_config
    )


def group_records(output_dir: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in (output_dir / "groups.jsonl").read_text().splitlines()]


def losses(result) -> list[float]:
    return [row["train/loss"] for row in result.history if "train/loss" in row]


def attached_to(sampler, **changes) -> ServerConfig:
    """The module's server as a server you run: its URL and key."""
    return ServerConfig(base_url=sampler.server.base_url, api_key=sampler.server.api_key, **changes)


@pytest.fixture(scope="module")
def served_run(policy, sampler, tmp_path_factory):
    """The one-process served short run (attached to the module's server) and its output dir."""
    output = tmp_path_factory.mktemp("one_process")
    attached = SamplerConfig(kind="served", server=attached_to(sampler))
    return short_run(policy, output, "served", attached), output / "served"


def test_a_short_run_matches_the_in_process_sampler(policy, served_run, tmp_path):
    served, served_dir = served_run
    local = short_run(policy, tmp_path, "hf", SamplerConfig())
    assert len(losses(served)) == 3
    assert losses(served) == pytest.approx(losses(local), abs=1e-3)
    # every step's groups were sampled by the adapter of the weights that step started from (groups.jsonl)
    served_groups, local_groups = group_records(served_dir), group_records(tmp_path / "hf")
    assert [g["policy_version"] for g in served_groups] == [1, 1, 2, 2, 3, 3]
    assert [g["state_id"] for g in served_groups] == [g["state_id"] for g in local_groups]
    assert all(row["train/reload_seconds"] > 0 for row in served.history if "train/loss" in row)


def test_a_resumed_served_run_samples_with_the_resumed_adapter(policy, sampler, served_run, tmp_path):
    """Stopped after its step-2 checkpoint and resumed: the versions in groups.jsonl go on rising (not back to 1),
    the server gets the checkpoint's adapter (the file it loaded holds the resumed LoRA weights) and the run
    continues as the straight one: the same groups and losses. A changed algorithm is refused on resume."""
    import copy

    from safetensors.torch import load_file

    attached = SamplerConfig(kind="served", server=attached_to(sampler))
    first = short_run(policy, tmp_path, "run", attached, max_steps=2, save_every=2, resume=True)
    assert first.step == 2
    resumed = short_run(policy, tmp_path, "run", attached, resume=True)
    assert resumed.resumed_from == 2 and resumed.step == 3
    straight, straight_dir = served_run
    groups = group_records(tmp_path / "run")
    assert [g["policy_version"] for g in groups] == [1, 1, 2, 2, 3, 3]
    assert [(g["state_id"], g["samples"]) for g in groups] == [
        (g["state_id"], g["samples"]) for g in group_records(straight_dir)
    ]
    assert losses(resumed) == pytest.approx(losses(straight), abs=1e-3)
    # the adapter served at step 3 is the checkpoint's weights (accelerate's model.safetensors of step 2)
    served = load_file(tmp_path / "run" / "served" / "adapters" / "v3" / "adapter_model.safetensors")
    saved = load_file(next((tmp_path / "run" / "checkpoints").glob("step_0000002/model.safetensors")))
    saved = {k.replace(".default", ""): v for k, v in saved.items() if "lora_" in k}
    assert served.keys() == saved.keys() and all(torch.equal(served[k], saved[k]) for k in served)
    with pytest.raises(ValueError, match="the job differs in \\['job'\\]"):
        model, processor, states, prompt = policy
        train_salvage_ds(
            copy.deepcopy(model), processor, states, SHORT.model_copy(update={"lam": 0.25}),
            loop_config(tmp_path, "run", **(SHORT_LOOP | {"resume": True})), prompt, sampler=attached,
        )  # fmt: skip


@pytest.mark.parametrize(
    "launch,managed", [("cpu_2proc", True), ("cpu_2proc_fsdp2", False)]
)  # DDP with the server the main process starts; FSDP2 (adapter gathered from shards) on the module's server
def test_two_processes_sample_from_the_main_processs_server(
    launch, managed, policy, sampler, served_run, tmp_path, monkeypatch
):
    """``accelerate launch`` with 2 CPU processes (gloo), a LoRA policy and the served sampler: the main process
    starts vLLM (managed) or attaches, loads each step's adapter, every process samples its own state from it.
    Per step both processes' groups record the same policy version (1, 2, 3), and the losses are the one-process
    served run's (same global batch: 2 states, one a process) within 1e-3 (the runs differ in summation order and
    in the seeds of the near-greedy sampling, as the one-process served and hf runs do). The job is the node's
    (``launch_job``), with its load config (``launch_load``: eager attention, float32)."""
    from rmsweb_kedro.models.modeling import save_checkpoint
    from rmsweb_kedro.pipelines.salvage_ds.nodes import SalvageDSNodeParams, launch_job
    from rmsweb_kedro.training.launch import run_launched

    model, processor, states, prompt = policy
    work = tmp_path / "launch"
    save_checkpoint(model, processor, work / "policy")  # base + adapter, as the node does before launching
    # the files the node writes: the states, the dev split, SFT's states
    for name in ("train", "dev", "replay"):
        pl_frame(states).write_parquet(work / f"{name}.parquet")
    # the launched processes read the job from a file: the module server's key reaches them in the environment
    monkeypatch.setenv("RMSWEB_TEST_VLLM_KEY", sampler.server.api_key.get_secret_value())
    server = (
        server_config()
        if managed
        else ServerConfig(base_url=sampler.server.base_url, api_key_env="RMSWEB_TEST_VLLM_KEY")
    )
    config = SalvageDSNodeParams(
        algorithm=SHORT,
        sampler=SamplerConfig(kind="served", server=server),
        loop=loop_config(tmp_path, launch, **(SHORT_LOOP | {"batch_size": 1})),
        prompt=prompt,
        launch=launch,
        launch_load={"attn_implementation": "eager", "dtype": "float32"},
    )
    launched = run_launched(
        launch, "conf/base/accelerate", "rmsweb_kedro.training.salvage_ds", launch_job(work, config)
    )
    straight, straight_dir = served_run
    assert launched.step == 3 and losses(launched) == pytest.approx(losses(straight), abs=1e-3)
    groups = group_records(tmp_path / launch)
    assert sorted((g["batch"], g["rank"], g["policy_version"]) for g in groups) == [
        (b, rank, b + 1) for b in range(3) for rank in (0, 1)
    ]
    assert sorted(g["state_id"] for g in groups) == sorted(g["state_id"] for g in group_records(straight_dir))
    assert (tmp_path / launch / "served" / "vllm_server.log").exists() == managed  # the main process's server


def pl_frame(rows):
    import polars as pl

    return pl.from_dicts(rows, infer_schema_length=None)


def test_a_full_weight_policy_is_refused_with_the_reason(policy, tmp_path):
    import copy

    model, processor, states, prompt = policy
    with pytest.raises(ValueError, match="needs a LoRA policy.*weight-transfer API"):
        train_salvage_ds(
            copy.deepcopy(model).merge_and_unload(),  # the adapter merged in: a full-weight policy
            processor,
            states,
            PARAMS,
            loop_config(tmp_path, "full", max_steps=1),
            prompt,
            sampler=SamplerConfig(kind="served", server=server_config()),
        )


def test_screenshot_prompts_are_the_trainers_on_the_server(policy, sampler, tmp_path):
    """A prompt with a screenshot: the server's prompt ids (image tokens expanded) are the trainer's, its greedy
    replies the in-process sampler's, and the trainer's log-probs with the image match the server's."""
    from rmsweb_kedro.training.salvage_ds.inputs import vision_inputs
    from tests.fixtures_model import draw_screenshot

    model, processor, states, prompt = policy
    with_image = prompt.model_copy(update={"observation": ["screenshot", "axtree"]})
    rows = [
        dict(s, screenshot=str(draw_screenshot(tmp_path / f"{i}.png", s["axtree"])))
        for i, s in enumerate(states[:2])
    ]
    prepared = prepare_states(rows, processor, with_image)
    image_token = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    assert all(image_token in s.prompt_ids for s in prepared)
    attached = ServedSampler(attached_to(sampler), tmp_path / "images", processor, with_image, PARAMS)
    try:
        served = attached.sample(model, prepared, 1, greedy=True)  # raises if the server's prompt ids differ
        assert texts(served) == texts(
            HFSampler(processor, with_image, PARAMS).sample(model, prepared, 1, greedy=True)
        )
        sampled = attached.sample(model, prepared, 2)
    finally:
        attached.close()
    samples = [(state, s) for state, g in zip(prepared, sampled, strict=True) for s in g]
    vision = vision_inputs([state.row for state, _ in samples], with_image, processor)
    worst = worst_logprob_gap(model, processor, samples, vision, image_token)
    assert worst <= LOGPROB_TOLERANCE, (
        f"trainer vs server log-prob differ by up to {worst:.4f} with the image"
    )


def served_models(server, api_key) -> tuple[int, list[dict]]:
    """``GET /v1/models`` with ``api_key``: the status and the models (each with the ``root`` it serves)."""
    import json

    status, text = _request(f"{server.root}/v1/models", api_key=api_key)
    return status, (json.loads(text)["data"] if status == 200 else [])


def weight_files(directory: Path) -> dict[str, tuple[int, int, int]]:
    """The weight files under ``directory`` (peft adapters left out): relative path -> (inode, size, mtime)."""
    return {
        str(path.relative_to(directory)): (path.stat().st_ino, path.stat().st_size, path.stat().st_mtime_ns)
        for path in directory.rglob("*.safetensors")
        if "adapters" not in path.relative_to(directory).parts and "adapter" not in path.parent.name
    }


def group_pids(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` still alive (walking /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def test_the_managed_server_needs_its_key_on_every_v1_route(policy, sampler):
    """No key, or a wrong one: 401, on chat's routes and on the runtime LoRA routes (which would load any adapter
    directory the server can read); the key: served. It binds loopback, and the key is neither on the server's
    command line (``ps`` shows it to every user) nor in its kept log."""
    model, processor, states, prompt = policy
    server = sampler.server
    assert server.base_url.startswith("http://127.0.0.1:")
    key = server.api_key
    assert len(key.get_secret_value()) >= 32
    assert served_models(server, None)[0] == 401
    assert served_models(server, SecretStr("not-the-key"))[0] == 401
    status, models = served_models(server, key)
    assert status == 200 and {m["id"] for m in models} >= {"policy-base", sampler.adapter}
    adapter = sampler.work_dir / "adapters" / f"v{sampler.version}"
    load = {"lora_name": "intruder", "lora_path": str(adapter)}
    assert _request(f"{server.root}/v1/load_lora_adapter", load)[0] == 401
    assert _request(f"{server.root}/v1/unload_lora_adapter", {"lora_name": sampler.adapter})[0] == 401
    assert sampler.adapter in {m["id"] for m in served_models(server, key)[1]}  # still loaded
    # the client sends it: a sample is served
    prepared = prepare_states(states[:1], processor, prompt)
    assert sampler.sample(model, prepared, 1, greedy=True)[0][0].completion_ids
    secret = key.get_secret_value()
    assert secret not in (sampler.work_dir / "vllm_server.log").read_text(errors="replace")
    for pid in group_pids(server.process.pid):
        assert secret not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")


def test_the_server_serves_the_checkpoints_base_in_place_at_every_start(policy, sampler, tmp_path):
    """The base weights are served from the directory the policy was loaded from: a second start of the sampler
    (a resumed run's) writes no copy of them (before: a whole copy at every start, ~16 GB at 8B), the checkpoint's
    files are untouched (same inodes, sizes and times), it samples, and it has a fresh key of its own. Stopped, its
    process group is gone and no longer registered."""
    from rmsweb_kedro.models.serving import checkpoint_directory

    model, processor, states, prompt = policy
    checkpoint = checkpoint_directory(model)
    assert checkpoint is not None and (checkpoint / "model.safetensors").exists()
    before = weight_files(checkpoint)
    prepared = prepare_states(states[:2], processor, prompt)
    again = ServedSampler(server_config(), tmp_path / "resumed", processor, prompt, PARAMS)
    try:
        groups = again.sample(model, prepared, 1, greedy=True)
        assert texts(groups) == texts(sampler.sample(model, prepared, 1, greedy=True))
        for served in (sampler, again):
            status, models = served_models(served.server, served.server.api_key)
            roots = {m["root"] for m in models if m["id"] == "policy-base"}
            assert status == 200 and roots == {str(checkpoint)}
            assert weight_files(served.work_dir) == {}  # only adapters were written
        assert again.server.api_key.get_secret_value() != sampler.server.api_key.get_secret_value()
        assert served_models(again.server, sampler.server.api_key)[0] == 401
        written = sum(p.stat().st_size for p in (tmp_path / "resumed").rglob("*") if p.is_file())
        print(f"a second start wrote {written} bytes under its work dir (adapter and log); base: "
              f"{sum(size for _, size, _ in before.values())} bytes served in place")  # fmt: skip
        pgid = again.server.process.pid
        assert any(again.server.base_url in what for what in processes.registered())
    finally:
        again.close()
    assert group_pids(pgid) == [] and again.server.process is None
    assert not any(again.server.base_url in what for what in processes.registered())
    assert weight_files(checkpoint) == before


def test_base_directory_is_the_loaded_checkpoint_only_while_the_weights_are_its(policy, lora_policy):
    import copy

    from rmsweb_kedro.models.serving import base_directory, checkpoint_directory

    model, *_ = policy
    assert base_directory(model) == checkpoint_directory(model) is not None
    trained = copy.deepcopy(model)
    with torch.no_grad():  # trained in memory after loading: the files are no longer its base
        for name, weight in trained.named_parameters():
            if "lora_" not in name:
                weight.add_(1e-3)
    assert checkpoint_directory(trained) == checkpoint_directory(model)
    assert base_directory(trained) is None
    assert base_directory(lora_policy[0]) is None  # built in memory: nothing on disk


def test_an_api_key_is_never_a_parameter():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="must not be written in parameters: export it"):
        ServerConfig.model_validate({"base_url": "http://127.0.0.1:8000/v1", "api_key": "sk-123"})
    dumped = ServerConfig(api_key=SecretStr("sk-123")).model_dump_json()
    assert "sk-123" not in dumped


def test_a_killed_server_stops_the_run_with_its_log(policy, sampler, tmp_path):
    model, processor, states, prompt = policy
    prepared = prepare_states(states[:2], processor, prompt)
    # a run attached to the server: killed after its first step, the next reload fails at once, naming it
    attached = SamplerConfig(kind="served", server=attached_to(sampler, max_retries=0))

    def kill(_model) -> dict:
        os.killpg(sampler.server.process.pid, signal.SIGKILL)
        sampler.server.process.wait(timeout=30)
        return {}

    config = loop_config(tmp_path, "killed", max_steps=3, batch_size=2, eval_every=1, save_every=0)
    with pytest.raises(ServerError, match="does not answer"):
        train_salvage_ds(model, processor, states, PARAMS, config, prompt, eval_fn=kill, sampler=attached)
    # the stage's own (managed) server: its exit code and log
    with torch.no_grad():
        lora_b(model)[0].add_(0.0)  # a new version: the sampler reloads first
    with pytest.raises(ServerError, match=r"vLLM server exited \(code -9\); its log .*vllm_server.log"):
        sampler.sample(model, prepared, 2)
