"""The training loop's live step metrics under ``accelerate launch`` (two processes, gloo on CPU:
conf/base/accelerate/cpu_2proc.yaml): the launched processes inherit the tracked run from the environment (as the
MLflow hook, runs/hooks/mlflow_tracking.py, exports it) and only the main process logs, so each optimizer step
appears once in MLflow, equal to the run's history.jsonl."""

from __future__ import annotations

import json
import os
import subprocess

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import STATE_SCHEMA
from rmsweb_kedro.runs.tracking import STEP_PREFIX_ENV
from rmsweb_kedro.training.launch import launch_command
from rmsweb_kedro.training.sft import SFTConfig

pytestmark = pytest.mark.slow


def test_two_processes_log_each_step_once(tmp_path, tiny_checkpoint, tiny_states):
    from mlflow import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(client.create_experiment("live"))
    pl.DataFrame(tiny_states[:32], schema=STATE_SCHEMA).write_parquet(tmp_path / "train.parquet")
    pl.DataFrame(tiny_states[32:40], schema=STATE_SCHEMA).write_parquet(tmp_path / "val.parquet")
    config = SFTConfig(
        loop={"output_dir": str(tmp_path / "run"), "max_steps": 2, "batch_size": 2, "warmup_steps": 1,
              "eval_every": 0, "log_every": 1, "progress": False, "mixed_precision": "no"},
        loss_on="all",
    )  # fmt: skip
    job = {"model_dir": str(tiny_checkpoint), "train_path": str(tmp_path / "train.parquet"),
           "val_path": str(tmp_path / "val.parquet"), "output_dir": config.loop.output_dir,
           "config": config.model_dump(mode="json")}  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(job))
    env = {
        **os.environ,
        "MLFLOW_RUN_ID": run.info.run_id,
        "MLFLOW_TRACKING_URI": uri,
        STEP_PREFIX_ENV: "train_sft",
    }
    done = subprocess.run(launch_command("cpu_2proc", "conf/base/accelerate", "rmsweb_kedro.training.sft", tmp_path / "job.json"), capture_output=True, text=True,
                          timeout=600, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    history = [json.loads(line) for line in open(tmp_path / "run" / "history.jsonl")]
    assert [row["step"] for row in history] == [1, 2]
    for key in ("train/loss", "lr", "train/grad_norm"):
        logged = client.get_metric_history(run.info.run_id, f"train_sft/{key}")
        assert sorted(m.step for m in logged) == [1, 2], key  # once a step: the main process only
        by_step = {r["step"]: r[key] for r in history}
        assert all(m.value == pytest.approx(by_step[m.step]) for m in logged), key
