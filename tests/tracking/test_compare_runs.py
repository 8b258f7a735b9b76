"""``python -m rmsweb_kedro.runs.compare``: two runs logged the way the MLflow hook logs ``model_comparison``
(``tracking.dataset_metrics``), printed side by side with the parameter that separates them."""

from __future__ import annotations

import os
import subprocess
import sys

import polars as pl
import pytest

from rmsweb_kedro.runs import tracking
from rmsweb_kedro.runs.compare import main


def log_run(uri: str, name: str, max_steps: str, rates: dict[str, float]) -> str:
    from mlflow import MlflowClient
    from mlflow.entities import Param

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("rmsweb_kedro") or client.get_experiment(
        client.create_experiment("rmsweb_kedro")
    )
    run = client.create_run(experiment.experiment_id, run_name=name)
    table = pl.DataFrame(
        {"model": list(rates), "step_success_rate": list(rates.values()), "episodes": [12] * len(rates)}
    )
    tracking.log_metrics(run.info.run_id, uri, tracking.dataset_metrics("model_comparison", table))
    client.log_batch(
        run.info.run_id, params=[Param("salvage_ds.loop.max_steps", max_steps), Param("seed", "0")]
    )
    client.set_terminated(run.info.run_id)
    return run.info.run_id


@pytest.fixture
def two_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    a = log_run(uri, "__default__", "36", {"base": 0.0, "sft": 0.52, "rmsweb": 0.55})
    b = log_run(uri, "__default__", "200", {"base": 0.0, "sft": 0.52, "rmsweb": 0.61})
    return tmp_path / "mlruns", a, b


def test_side_by_side_with_the_parameter_change(two_runs, capsys):
    store, a, b = two_runs
    assert main([a, b, "--tracking-uri", str(store)]) == 0
    out = capsys.readouterr().out
    rows = {
        tuple(cell.strip() for cell in line.strip("|").split("|")) for line in out.splitlines() if "|" in line
    }
    assert ("rmsweb", "step_success_rate", "0.55", "0.61") in rows
    assert ("sft", "step_success_rate", "0.52", "0.52") in rows
    assert ("salvage_ds.loop.max_steps", "36", "200") in rows
    assert not any(row[0] == "seed" for row in rows)  # equal in both: not a difference


def test_runs_without_a_comparison_and_unknown_ids_say_so(two_runs, capsys, tmp_path):
    store, a, _ = two_runs
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store.as_uri())
    bare = client.create_run(client.get_experiment_by_name("rmsweb_kedro").experiment_id).info.run_id
    assert main([bare, bare + "0", "--tracking-uri", str(store)]) == 2
    assert "Run" in capsys.readouterr().err
    client.create_run(client.get_experiment_by_name("rmsweb_kedro").experiment_id)
    other = client.create_run(client.get_experiment_by_name("rmsweb_kedro").experiment_id).info.run_id
    assert main([bare, other, "--tracking-uri", str(store)]) == 2
    assert "ran the evaluate pipeline with tracking on" in capsys.readouterr().err


def test_command_line(two_runs):
    store, a, b = two_runs
    result = subprocess.run(
        [sys.executable, "-m", "rmsweb_kedro.runs.compare", a, b, "--tracking-uri", str(store)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| rmsweb" in result.stdout and "0.61" in result.stdout
