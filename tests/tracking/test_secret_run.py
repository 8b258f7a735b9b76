"""A ``kedro run`` whose teacher is an OpenAI-compatible endpoint (a real local HTTP server around the tiny
checkpoint) with its API key only in conf/local/credentials.yml, tracking on: the key must reach the endpoint
through Kedro's credentials (no environment fallback, so the run fails otherwise) and appear in no file the run
wrote, the MLflow store included."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import tasks_to_frame
from tests.collect.local_openai_server import LocalChatServer
from tests.fixtures_web import chromium_available
from tests.tracking.test_tracking import PROJECT, kedro_run

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FAKE_KEY = "sk-FAKE-rmsweb-collect-5d0e8b"
CONF = ["catalog_tasks.yml", "parameters_sandbox.yml", "catalog_collect.yml", "parameters_collect.yml",
        "catalog_trajectories.yml", "parameters_trajectories.yml", "parameters_rollouts.yml", "globals.yml",
        "logging.yml", "mlflow.yml", "parameters_tracking.yml", "catalog_tracking.yml"]  # fmt: skip


def test_a_collect_run_uses_the_key_and_writes_it_nowhere(tmp_path, tiny_checkpoint, sandbox_task_list):
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    project = tmp_path
    shutil.copy(PROJECT / "pyproject.toml", project)
    (project / "src").mkdir()
    for env in ("base", "local"):
        (project / "conf" / env).mkdir(parents=True)
    for name in CONF:
        if (PROJECT / "conf" / "base" / name).exists():
            shutil.copy(PROJECT / "conf" / "base" / name, project / "conf" / "base" / name)
    (project / "conf" / "local" / "credentials.yml").write_text(f"teacher_endpoint:\n  api_key: {FAKE_KEY}\n")
    tasks = project / "data" / "02_intermediate" / "tasks"
    tasks.mkdir(parents=True)
    tasks_to_frame(sandbox_task_list).write_parquet(tasks / "tasks.parquet")
    with LocalChatServer(tiny_checkpoint) as server:
        endpoint = {"base_url": server.base_url, "model": server.model_name, "credentials": "teacher_endpoint",
                    "api_key_env": None, "max_tokens": 8, "max_retries": 0}  # fmt: skip
        collect = {"max_tasks": 1, "modes": ["single"], "corpus_modes": ["single"], "attempts": 1,
                   "max_steps": 2, "n_envs": 1, "max_unparsed": 1, "progress": False,
                   "journal_path": str(project / "data" / "journal.jsonl"),
                   "teacher": {"kind": "openai", "endpoint": endpoint}}  # fmt: skip
        kedro_run(project, ["collect"], {"collect": collect})
        assert server.requests, "the teacher never called its endpoint"
    log = pl.read_parquet(project / "data" / "02_intermediate" / "collect" / "collection_log.parquet")
    assert (
        log.height == 1
        and json.loads(log["trajectory"][0])["verdict"]["judged_by"]["kind"] == "sandbox_checker"
    )
    stats = json.loads((project / "data" / "08_reporting" / "collect" / "collection_stats.json").read_text())
    assert stats  # the statistics dump the teacher's configuration
    written = [p for p in project.rglob("*") if p.is_file() and "conf/local" not in p.as_posix()]
    assert any("mlruns" in p.parts for p in written), "the MLflow store was written and is searched"
    assert [p for p in written if FAKE_KEY.encode() in p.read_bytes()] == []
