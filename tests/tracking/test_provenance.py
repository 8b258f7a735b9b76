"""The run manifest's parts (runs/provenance.py), checked against what they describe: a git repo made here, files
hashed in two places, secrets in nested parameters, a Parquet table read back by polars."""

from __future__ import annotations

import subprocess
from pathlib import Path

import polars as pl
from pydantic import SecretStr

from rmsweb_kedro.runs.provenance import (
    MASK,
    checkpoint_record,
    directory_sha256,
    git_state,
    hardware,
    manifest_markdown,
    mask_secrets,
    read_parquet_manifest,
    seeds,
    stamp_parquet,
    start_manifest,
)


def git_repo(path: Path) -> str:
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    (path / "a.txt").write_text("one\n")
    subprocess.run(["git", "add", "a.txt"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=path, check=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True
    ).stdout.strip()


def test_manifest_commit_is_the_repos_head_and_dirty_is_seen(tmp_path):
    head = git_repo(tmp_path)
    manifest = start_manifest(
        tmp_path, {"sft": {"training": {"loop": {"seed": 3}}}}, "kedro run", ["__default__"]
    )
    assert manifest.git_commit == head and manifest.git_dirty is False
    (tmp_path / "untracked.txt").write_text("not part of the code\n")
    assert git_state(tmp_path) == (head, False)  # untracked files (data, outputs) do not count
    (tmp_path / "a.txt").write_text("two\n")
    assert git_state(tmp_path) == (head, True)


def test_outside_a_checkout(tmp_path):
    assert git_state(tmp_path) == (None, None)
    assert "not a git checkout" in manifest_markdown(start_manifest(tmp_path, {}, "kedro run", ["sft"]))


def test_seeds_every_integer_seed_by_path():
    params = {"collect": {"seed": 1, "teacher": {"kind": "scripted"}}, "sft": {"tiny": {"seed": 2},
              "augmentation": {"seed": 0}}, "mining": {"use_seed": True}}  # fmt: skip
    assert seeds(params) == {"collect.seed": 1, "sft.tiny.seed": 2, "sft.augmentation.seed": 0}


def test_seeds_only_of_the_parameters_the_pipelines_read():
    """A default run lists its stages' seeds, not the ablations' (which read ``params:ablations...``)."""
    params = {"sft": {"tiny": {"seed": 2}, "training": {"loop": {"seed": 0}}}, "evaluate": {"seed": 0,
              "online": {"sandbox_seed": 0}}, "ablations": {"modes": {"seed": 5}}, "sandbox": {"seed": 1}}  # fmt: skip
    read = ["params:sft.training", "params:evaluate.online", "sft_states_train", "params:sandbox"]
    assert seeds(params, read=read) == {
        "sft.training.loop.seed": 0,
        "evaluate.online.sandbox_seed": 0,
        "sandbox.seed": 1,
    }
    assert seeds(params, read=["parameters"]) == seeds(params)  # a node reading every parameter
    manifest = start_manifest(Path("/"), params, "kedro run", ["sft"], read_parameters={"params:sft"})
    assert manifest.seeds == {"sft.tiny.seed": 2, "sft.training.loop.seed": 0}


def test_hardware_names_the_cpu_its_instruction_sets_and_torchs_kernels():
    import torch

    info = hardware()
    cpuinfo = Path("/proc/cpuinfo").read_text()
    flags = next(line for line in cpuinfo.splitlines() if line.startswith("flags")).split(":")[1].split()
    assert info["cpu_flags"] and set(info["cpu_flags"]) <= set(flags)
    assert ("avx2" in info["cpu_flags"]) == ("avx2" in flags)
    model = next(line for line in cpuinfo.splitlines() if line.startswith("model name")).split(":")[1].strip()
    assert info["cpu_model"].startswith(model)
    assert info["torch_threads"] == torch.get_num_threads()
    assert info["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    manifest = start_manifest(Path("/"), {}, "kedro run", ["sft"])
    # the browser that renders the observations: Debian's chromium here (the tests' browser)
    version = subprocess.run(["/usr/bin/chromium", "--version"], capture_output=True, text=True).stdout
    assert manifest.packages["chromium"] in version and manifest.packages["chromium"].count(".") == 3
    markdown = manifest_markdown(manifest)
    assert model in markdown and f"{info['torch_threads']} threads" in markdown and "avx2" in markdown


def test_secrets_are_masked_at_any_depth_and_nothing_else():
    params = {
        "teacher": {"endpoint": {"base_url": "http://x", "api_key": "sk-live-1", "credentials": "teacher_endpoint",
                                 "max_tokens": 512}},
        "judges": [{"API_KEY": SecretStr("sk-live-2")}, {"password": "hunter2", "model": "m"}],
        "token": SecretStr("t"),
    }  # fmt: skip
    masked = mask_secrets(params)
    assert masked["teacher"]["endpoint"] == {"base_url": "http://x", "api_key": MASK,
                                             "credentials": "teacher_endpoint", "max_tokens": 512}  # fmt: skip
    assert masked["judges"] == [{"API_KEY": MASK}, {"password": MASK, "model": "m"}]
    assert masked["token"] == MASK and "sk-live" not in str(masked)
    assert params["teacher"]["endpoint"]["api_key"] == "sk-live-1"  # the input is left as it was


def test_directory_hash_is_content_not_location(tmp_path):
    for place in ("a", "b"):
        (tmp_path / place / "sub").mkdir(parents=True)
        (tmp_path / place / "config.json").write_text('{"x": 1}')
        (tmp_path / place / "sub" / "w.bin").write_bytes(b"\0" * 100)
    first, second = directory_sha256(tmp_path / "a"), directory_sha256(tmp_path / "b")
    assert first == second and first[1:] == (2, 108)
    (tmp_path / "b" / "sub" / "w.bin").write_bytes(b"\1" * 100)
    assert directory_sha256(tmp_path / "b")[0] != first[0]
    assert checkpoint_record(tmp_path / "a", "saved").sha256 == first[0]


def test_parquet_table_carries_the_manifest(tmp_path):
    git_repo(tmp_path)
    manifest = start_manifest(tmp_path, {"seed": 5}, "kedro run --pipelines evaluate", ["evaluate"])
    manifest.mlflow_run_id = "abc123"
    frame = pl.DataFrame({"model": ["base", "sft"], "step_success_rate": [0.0, 0.52]})
    path = tmp_path / "model_comparison.parquet"
    frame.write_parquet(path)
    stamp_parquet(path, manifest)
    assert pl.read_parquet(path).equals(frame)
    assert read_parquet_manifest(path) == manifest
    text = manifest_markdown(manifest.model_dump(mode="json"))
    assert text.startswith("## Run manifest") and manifest.git_commit in text and "`abc123`" in text
    assert "seed=5" in text
