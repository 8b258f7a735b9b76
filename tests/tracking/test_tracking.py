"""Experiment tracking and provenance through real ``kedro run`` sessions in a copy of the project (a git repo of
its own): two stages (trajectories on the hand-written examples, SFT of the tiny checkpoint for a few steps) with
tracking on, read back through MLflow's client and matched against the catalog's files; the same with tracking off
writes nothing under ``mlruns/``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import STATE_SCHEMA
from rmsweb_kedro.runs.provenance import directory_sha256

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLES = PROJECT / "data" / "01_raw" / "examples" / "trajectories"
CONF = ["catalog_trajectories.yml", "parameters_trajectories.yml", "catalog_sft_data.yml", "catalog_sft.yml",
        "parameters_sft.yml", "globals.yml", "logging.yml", "mlflow.yml", "parameters_tracking.yml",
        "catalog_tracking.yml"]  # fmt: skip
FAKE_KEY = "sk-FAKE-rmsweb-tracking-test-7f3a9c"
SFT = {
    "augmentation": {"copies": 0},
    "accuracy_states": 0,  # no greedy decoding: the step metrics are what is tracked here
    "training": {"loop": {"max_steps": 4, "batch_size": 4, "eval_every": 2, "max_eval_batches": 1,
                          "save_every": 0, "mixed_precision": "no", "max_seconds": None, "log_every": 2,
                          "progress": False}},
}  # fmt: skip


def make_project(root: Path, states: list[dict]) -> Path:
    """A project copy with the conf of the two stages and tracking, its val/train states, a fake API key in
    conf/local/credentials.yml, committed to a git repo of its own."""
    shutil.copy(PROJECT / "pyproject.toml", root)
    (root / "src").mkdir()
    for env in ("base", "local"):
        (root / "conf" / env).mkdir(parents=True)
    for name in CONF:
        shutil.copy(PROJECT / "conf" / "base" / name, root / "conf" / "base" / name)
    (root / "conf" / "local" / "credentials.yml").write_text(f"teacher_endpoint:\n  api_key: {FAKE_KEY}\n")
    frame = pl.DataFrame(states, schema=STATE_SCHEMA)
    sft_dir = root / "data" / "05_model_input" / "sft"
    sft_dir.mkdir(parents=True)
    frame.head(48).write_parquet(sft_dir / "sft_states_train.parquet")
    frame.tail(12).write_parquet(sft_dir / "sft_states_val.parquet")
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".gitignore").write_text("data/\nmlruns/\nconf/local/\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "test project"], cwd=root, check=True)
    return root


def kedro_run(project: Path, pipelines: list[str], params: dict) -> None:
    from kedro.framework.project import pipelines as registry
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    bootstrap_project(project)
    cwd = os.getcwd()
    os.chdir(project)
    try:
        with KedroSession.create(project_path=project, runtime_params=params) as session:
            session.run(pipeline_names=pipelines)
    finally:
        os.chdir(cwd)
        # Kedro keeps the requested pipelines process-wide after run(pipeline_names=...): later find_pipelines()
        # calls in this process (other tests) would see only these.
        registry.set_requested(None)


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, tiny_states, tiny_checkpoint):
    project = make_project(tmp_path_factory.mktemp("tracked"), tiny_states)
    params = {
        "trajectories": {"raw_root": str(EXAMPLES)},
        "sft": SFT | {"base_checkpoint": {"path": str(tiny_checkpoint)}},
        "leak_check": {"api_key": FAKE_KEY},  # a key given on the command line by mistake: must be masked
    }
    kedro_run(project, ["trajectories", "sft"], params)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=(project / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("rmsweb_kedro")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, "one kedro run, one MLflow run"
    return project, client, runs[0]


def head(project: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def test_params_tags_and_manifest(tracked):
    project, client, run = tracked
    assert run.info.status == "FINISHED" and run.info.run_name == "trajectories+sft"
    params = run.data.params
    assert params["sft.training.loop.max_steps"] == "4" and params["trajectories.raw_root"] == str(EXAMPLES)
    tags = run.data.tags
    assert tags["mlflow.source.git.commit"] == head(project)
    manifest = json.loads((project / "data" / "08_reporting" / "run_manifest.json").read_text())
    assert manifest["git_commit"] == head(project) and manifest["git_dirty"] is False
    assert manifest["mlflow_run_id"] == run.info.run_id
    assert manifest["pipelines"] == ["trajectories", "sft"]
    assert manifest["seeds"]["sft.training.loop.seed"] == 0 and manifest["packages"]["torch"].startswith("2.")
    assert tags["version/mlflow"] == manifest["packages"]["mlflow"]
    assert manifest["hardware"]["cpus"] >= 1 and manifest["hardware"]["torch_threads"] >= 1
    # the seeds of the two pipelines that ran, not collect's, evaluate's or the ablations'
    assert manifest["seeds"] and all(k.startswith(("sft.", "trajectories.")) for k in manifest["seeds"])
    # Every checkpoint the run wrote: its path and the hash of what is on disk, also as a tag of the run.
    assert set(manifest["checkpoints"]) == {"base_model", "sft_model"}
    for name, record in manifest["checkpoints"].items():
        assert Path(record["path"]).is_relative_to(project / "data" / "06_models" / name)
        assert record["sha256"] == directory_sha256(record["path"])[0] and record["role"] == "saved"
        assert tags[f"checkpoint/{name}"] == f"{record['path']} sha256:{record['sha256']}"


def test_step_histories_and_stage_metrics_match_the_catalog_files(tracked):
    project, client, run = tracked
    reporting = project / "data" / "08_reporting"
    sft = json.loads((reporting / "sft" / "sft_metrics.json").read_text())
    history = sft["history"]
    assert [row["step"] for row in history] == [1, 2, 3, 4]
    for key in ("train/loss", "eval/loss", "lr"):
        logged = client.get_metric_history(run.info.run_id, f"train_sft/{key}")
        expected = [(row["step"], row[key]) for row in history if key in row]
        logged = sorted((m.step, m.value) for m in logged)
        assert [s for s, _ in logged] == [s for s, _ in expected], key
        assert [v for _, v in logged] == pytest.approx([v for _, v in expected]), key
    metrics = run.data.metrics
    # no state scored (accuracy_states 0): the rates are null in the file and not logged; the count is
    assert metrics["sft_metrics/sft/n_states"] == sft["sft"]["n_states"] == 0
    assert "sft_metrics/sft/step_success_rate" not in metrics and sft["sft"]["step_success_rate"] is None
    assert metrics["sft_metrics/steps"] == 4
    ingest = json.loads((reporting / "ingest_report.json").read_text())
    assert metrics["ingest_report/records_in"] == ingest["records_in"] == 3
    assert not any(key.startswith("sft_metrics/config") for key in metrics)  # configuration is a parameter


def test_reporting_files_are_artifacts(tracked, tmp_path):
    project, client, run = tracked

    def files(path: str) -> set[str]:
        found = set()
        for info in client.list_artifacts(run.info.run_id, path):
            found |= files(info.path) if info.is_dir else {info.path}
        return found

    logged = files("data/08_reporting")
    on_disk = {
        p.relative_to(project).as_posix()
        for p in (project / "data" / "08_reporting").rglob("*")
        if p.is_file()
    }
    assert logged == on_disk
    assert {"data/08_reporting/sft/sft_loss_curve.png", "data/08_reporting/run_manifest.json"} <= logged
    local = client.download_artifacts(
        run.info.run_id, "data/08_reporting/sft/sft_metrics.json", str(tmp_path)
    )
    assert Path(local).read_bytes() == (project / "data/08_reporting/sft/sft_metrics.json").read_bytes()


def test_no_file_the_run_wrote_holds_the_api_key(tracked):
    project, _, _ = tracked
    leaks = [
        path
        for path in project.rglob("*")
        if path.is_file() and "conf/local" not in path.as_posix() and FAKE_KEY.encode() in path.read_bytes()
    ]
    assert not leaks
    manifest = json.loads((project / "data" / "08_reporting" / "run_manifest.json").read_text())
    assert "'api_key': '**********'" in manifest["command"]  # the mistaken key, masked where it is recorded
    assert any((project / "mlruns").rglob("*")), "the MLflow store was searched"


def test_tracking_off_writes_nothing_under_mlruns(tmp_path, tiny_states):
    project = make_project(tmp_path, tiny_states)
    kedro_run(
        project,
        ["trajectories"],
        {"trajectories": {"raw_root": str(EXAMPLES)}, "tracking": {"enabled": False}},
    )
    assert not (project / "mlruns").exists()
    assert "MLFLOW_RUN_ID" not in os.environ
    reporting = project / "data" / "08_reporting"
    assert json.loads((reporting / "ingest_report.json").read_text())["records_in"] == 3
    manifest = json.loads((reporting / "run_manifest.json").read_text())
    assert manifest["mlflow_run_id"] is None and manifest["git_commit"] == head(project)
