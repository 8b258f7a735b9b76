"""MLflow logging shared by the MLflow hook (``runs/hooks/mlflow_tracking.py``), the training loop and
``compare_runs``.

The step-logging path: the hook starts one MLflow run per ``kedro run`` (through kedro-mlflow) and exports it to
the process environment as MLflow's own ``MLFLOW_RUN_ID`` / ``MLFLOW_TRACKING_URI``, plus :data:`STEP_PREFIX_ENV`
naming the node that runs; the training loop (``training/loop.py``) calls :func:`log_step` for every history row,
and :func:`log_step` reads only these variables, so the loop logs its step metrics live into the same run, whether
it runs in the Kedro process or in processes started by ``accelerate launch`` (which inherit the environment).
With tracking off the variables are unset and nothing imports mlflow; once the run is over the hook restores them as
they were.

Metric names: ``<node>/<train|eval>/<name>`` for live step metrics (``train_sft/train/loss``; :func:`step_prefix`), and
``<dataset>/<path>`` for the numbers of a saved dataset (``model_comparison/sft/step_success_rate``,
``collection_stats/modes/reflection_retries/yield``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

#: The node whose training loop is logging (a prefix of its live step metrics); set by the MLflow hook.
STEP_PREFIX_ENV = "RMSWEB_MLFLOW_STEP_PREFIX"
#: Subtrees of a dataset that are configuration (already logged as MLflow parameters), not measurements.
CONFIG_KEYS = frozenset({"config", "params", "parameters", "history"})


def step_prefix(node_name: str, namespace: str | None) -> str:
    """The ``<node>`` of a node's live step metrics: its name without its stage's namespace, the innermost one
    (``sft.train_sft`` -> ``train_sft``; a variant's ``ablations.rl_grpo.salvage_ds.train_salvage_ds`` ->
    ``ablations.rl_grpo.train_salvage_ds``): short names, the same for a stage run alone or in the recipe."""
    if not namespace:
        return node_name
    outer = namespace.rpartition(".")[0]
    own = node_name.removeprefix(f"{namespace}.")
    return f"{outer}.{own}" if outer else own


def metric_key(*parts: str) -> str:
    """An MLflow metric name from ``parts`` joined by ``/`` (characters MLflow refuses become ``_``)."""
    return re.sub(r"[^\w\-./ ]", "_", "/".join(str(p) for p in parts if p != ""))


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def flat_numbers(data: Any, prefix: str) -> Iterator[tuple[str, float]]:
    """``(key, value)`` for every finite number (and bool, as 0/1) in nested dicts, skipping lists and the
    :data:`CONFIG_KEYS` subtrees (step histories are logged live, configuration as parameters)."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key not in CONFIG_KEYS:
                yield from flat_numbers(value, metric_key(prefix, key))
        return
    number = _number(data)
    if number is not None:
        yield prefix, number


def dataset_metrics(name: str, data: Any) -> list[tuple[str, float, int]]:
    """``(key, value, step)`` triples for a saved dataset: a dict's numbers (:func:`flat_numbers`); a table's
    numeric cells by row label (its first string column, e.g. ``model``) and column; a table with a ``step``
    column as step histories."""
    import polars as pl

    if isinstance(data, dict):
        return [(key, value, 0) for key, value in flat_numbers(data, name)]
    if not isinstance(data, pl.DataFrame):
        return []
    numeric = [c for c, t in data.schema.items() if t.is_numeric() or t == pl.Boolean]
    if "step" in data.columns:
        return [
            (metric_key(name, column), value, int(row["step"]))
            for row in data.iter_rows(named=True)
            for column in numeric
            if column != "step" and (value := _number(row[column])) is not None
        ]
    labels = [c for c, t in data.schema.items() if t == pl.String]
    if not labels:
        return []
    return [
        (metric_key(name, row[labels[0]], column), value, 0)
        for row in data.iter_rows(named=True)
        for column in numeric
        if row[labels[0]] is not None and (value := _number(row[column])) is not None
    ]


@cache
def client(tracking_uri: str):
    """The MLflow client of a tracking URI, one per URI for the process (the hook's artifacts, the metrics)."""
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def log_step(row: dict[str, Any]) -> None:
    """Log one training-loop history row (``{"step", "lr", "train/loss", ...}``) into the tracked run, as
    ``<node>/<key>`` at its step. A no-op unless the MLflow hook exported a run (call it on the main process
    only: the other processes hold the same averaged numbers)."""
    run_id, uri = os.environ.get("MLFLOW_RUN_ID"), os.environ.get("MLFLOW_TRACKING_URI")
    if not run_id or not uri:
        return
    import time

    from mlflow.entities import Metric

    prefix, step, now = os.environ.get(STEP_PREFIX_ENV, "train"), int(row["step"]), int(time.time() * 1000)
    metrics = [
        Metric(metric_key(prefix, key), value, now, step)
        for key, raw in row.items()
        if key != "step" and (value := _number(raw)) is not None
    ]
    client(uri).log_batch(run_id, metrics=metrics, synchronous=True)


def log_metrics(run_id: str, tracking_uri: str, triples: list[tuple[str, float, int]]) -> None:
    """Log ``(key, value, step)`` triples in batches (MLflow takes at most 1,000 metrics a call)."""
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = [Metric(key, value, now, step) for key, value, step in triples]
    for start in range(0, len(metrics), 1000):
        client(tracking_uri).log_batch(run_id, metrics=metrics[start : start + 1000], synchronous=True)
