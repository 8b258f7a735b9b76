"""Mining and evaluate with ``policy.server``: the node starts a real vLLM server (vLLM's CPU build, in the venv
``scripts/vllm_env.sh`` makes) for the checkpoint it scores, on 127.0.0.1, and stops it at the node's end.

One checkpoint for the module: the tiny Qwen3-VL fine-tuned briefly (head_dim 32: what vLLM's CPU attention takes)
with a rank-8 LoRA adapter whose B matrices are moved off zero, saved as the stages save it (base + ``adapter/``)
and loaded back by the real checkpoint dataset: so the server serves the adapter with ``--lora-modules``."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import STATE_SCHEMA
from rmsweb_kedro.models.serving import ServerError
from tests.salvage_ds.conftest import make_states
from tests.salvage_ds.test_served import server_config


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, lora_policy):
    """(checkpoint dataset value, its directory, states, prompt, the replies without the adapter): a LoRA
    checkpoint saved and loaded back. The adapter is moved off zero far enough to change the greedy replies (the
    fine-tuned base answers ``click(6)`` everywhere; with it each state gets its own reply), so a server of the base
    alone would not pass."""
    import copy

    import torch

    from rmsweb_kedro.datasets.checkpoint import CheckpointDataset
    from rmsweb_kedro.pipelines.evaluate.nodes import predict_offline

    model, processor, trained, prompt = lora_policy
    model = copy.deepcopy(model)  # its adapter is moved below
    states = pl.DataFrame(trained, schema=STATE_SCHEMA)  # the 8 states the base was fine-tuned on
    params = {"policy": {"kind": "hf", "prompt": prompt.model_dump(), "max_new_tokens": 16, "batch_size": 8}}
    with model.disable_adapter():
        base_replies = predict_offline(states, (model, processor), params, "base")["reply"].to_list()
    torch.manual_seed(2)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.add_(0.14 * torch.randn_like(weight))
    directory = tmp_path_factory.mktemp("ckpt") / "sft_model"
    dataset = CheckpointDataset(str(directory))
    dataset.save((model, processor))
    assert (directory / "adapter" / "adapter_config.json").exists()
    return dataset.load(), directory, states, prompt.model_dump(), base_replies


def server(**changes) -> dict:
    """``policy.server`` for the CPU build (tests/salvage_ds/test_served.py: float32, 1 GiB of KV cache, no chunked
    prefill)."""
    return server_config(**changes).model_dump(exclude={"model"})


def running(directory: Path) -> list[int]:
    """Pids of processes whose command line names ``directory`` (the managed server and its engine)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(directory) in line and "vllm" in line:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_evaluate_offline_on_a_managed_server_equals_the_in_process_policy(checkpoint, tmp_path):
    from rmsweb_kedro.measures.evaluation import offline_metrics
    from rmsweb_kedro.pipelines.evaluate.nodes import predict_offline

    model, directory, states, prompt, base_replies = checkpoint
    policy = {"prompt": prompt, "max_new_tokens": 16, "batch_size": 8}
    local = predict_offline(states, model, {"policy": {"kind": "hf", **policy}}, "sft")
    logs = tmp_path / "servers"
    served_params = {"policy": {"kind": "openai", "server": server(), **policy}, "server_logs": str(logs)}
    served = predict_offline(states, model, served_params, "sft")

    replies = served["reply"].to_list()
    assert replies == local["reply"].to_list()  # greedy, token for token
    assert offline_metrics(served).drop("model").equals(offline_metrics(local).drop("model"))
    assert served.drop("model").equals(local.drop("model"))  # every scored column, state by state
    # the adapter was served (not the base alone), and the replies differ by state: the comparison says something
    assert replies != base_replies and len(set(replies)) > 2
    log = (logs / "sft_offline.log").read_text()  # kept
    assert "lora_modules" in log and "sft-base" in log  # the adapter served as `sft`, beside its base
    assert running(directory) == []  # stopped at the node's end: no process serves the checkpoint any more


@pytest.mark.slow
def test_mining_probes_k_samples_per_state_on_a_managed_server(checkpoint, tmp_path, monkeypatch):
    """... with the server's key from the environment variable ``api_key_env`` names: the node's client sends it
    (a request without it, or with another, is refused: every probe would fail as the environment's), and it is
    not in the kept log."""
    from rmsweb_kedro.pipelines.mining.nodes import prepare_corpus, probe_offline

    model, directory, states, prompt, _ = checkpoint
    monkeypatch.setenv("RMSWEB_TEST_MINING_KEY", "mining-key-0123456789abcdef0123456789")
    params = {
        "scoring": {"k": 4, "max_new_tokens": 16, "batch_size": 4},
        "policy": {
            "kind": "openai",
            "prompt": prompt,
            "server": server(api_key_env="RMSWEB_TEST_MINING_KEY"),
        },
        "server_logs": str(tmp_path / "servers"),
        "max_states_probed": 4,
    }
    corpus = prepare_corpus(states.head(4), states.tail(2), params)
    probed = probe_offline(corpus, model, params).filter(pl.col("competence").is_not_null())

    assert probed.height == 4
    assert probed["n_samples"].to_list() == [4] * 4
    assert [len(s) for s in probed["sampled_actions"].to_list()] == [4] * 4
    assert probed["failure_mode"].drop_nulls().str.contains("environment").not_().all()
    log = (tmp_path / "servers" / "offline.log").read_text()
    assert log and "mining-key-0123456789abcdef0123456789" not in log
    assert running(directory) == []


def test_a_configured_key_comes_from_its_environment_variable(monkeypatch):
    from pydantic import SecretStr

    from rmsweb_kedro.models.serving import ServerConfig, VLLMServer

    monkeypatch.setenv("RMSWEB_TEST_KEY", "sk-from-the-environment")
    server = VLLMServer(ServerConfig(base_url="http://127.0.0.1:1/v1", api_key_env="RMSWEB_TEST_KEY"))
    assert server.api_key == SecretStr("sk-from-the-environment")
    monkeypatch.delenv("RMSWEB_TEST_KEY")
    with pytest.raises(
        ServerError, match=r"mining\.policy\.server\.api_key_env is 'RMSWEB_TEST_KEY', but that "
    ):
        VLLMServer(
            ServerConfig(python="/usr/bin/python3", api_key_env="RMSWEB_TEST_KEY"),
            where="mining.policy.server",
        )
    managed = VLLMServer(ServerConfig(python="/usr/bin/python3"), "/tmp/ckpt", where="mining.policy.server")
    assert managed.api_key is None  # drawn at start
    assert not any("key" in arg for arg in managed.command(8000))  # never on the command line


def test_a_bad_python_names_the_parameter(tmp_path):
    from rmsweb_kedro.pipelines.evaluate.nodes import predict_offline

    states = pl.DataFrame(make_states(2), schema=STATE_SCHEMA)
    params = {
        "policy": {"kind": "openai", "server": {"python": str(tmp_path / "no-python")}},
        "server_logs": str(tmp_path / "servers"),
    }
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(ServerError, match=r"evaluate\.policy\.server\.python is .*no-python.*vllm_env\.sh"):
        predict_offline(states, str(tmp_path / "ckpt"), params, "base")
    assert not (tmp_path / "servers").exists()  # nothing started, no log


def test_a_managed_server_is_asked_for_in_one_place(tmp_path):
    """The server block is refused where it would be ignored, and a model built in memory (no checkpoint
    directory to serve) is an error naming the parameter."""
    from pydantic import ValidationError

    from rmsweb_kedro.agents.factory import PolicySpec, build_policy
    from rmsweb_kedro.measures.evaluation import EvaluateParams
    from rmsweb_kedro.models.serving import serve_checkpoint

    server = {"python": "/usr/bin/python3"}
    with pytest.raises(ValidationError, match="needs kind: openai and no endpoint"):
        PolicySpec(kind="hf", server=server)
    with pytest.raises(ValidationError, match="needs kind: openai and no endpoint"):
        PolicySpec(kind="openai", server=server, endpoint={"base_url": "http://127.0.0.1:1/v1", "model": "m"})
    with pytest.raises(ValidationError, match="evaluate.served names servers you run"):
        EvaluateParams(
            policy={"kind": "openai", "server": server},
            served={"sft": {"base_url": "http://127.0.0.1:1/v1", "model": "sft"}},
        )
    with pytest.raises(ValueError, match="only the mining and evaluate stages start a server"):
        build_policy({"kind": "openai", "server": server})  # live, a model teacher: an endpoint you run
    spec = PolicySpec(kind="openai", server=server)
    with pytest.raises(
        ServerError, match=r"mining\.policy\.server: the model to serve has no checkpoint dir"
    ):
        with serve_checkpoint(
            spec.server, (object(), None), "sft", tmp_path / "x.log", "mining.policy.server"
        ):
            pass
