"""Print the model comparison of two or more MLflow runs side by side, and the parameters that differ.

    python -m rmsweb_kedro.runs.compare RUN_A RUN_B [RUN_C ...] [--tracking-uri mlruns] [--metrics a,b]

Each ``kedro run`` that evaluates logs ``model_comparison/<model>/<column>`` metrics (``tracking.dataset_metrics``
on the ``model_comparison`` table); here every run becomes one column and every (model, metric) one row, so the
default run and an experiment run (say ``--params salvage_ds.loop.max_steps=200``) read side by side, with the
parameter change that separates them printed underneath. Run ids are shown by ``kedro mlflow ui`` and in each
report's manifest (``data/08_reporting/run_manifest.json``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import polars as pl

PREFIX = "model_comparison/"
#: The comparison's headline columns, in reading order; ``--metrics`` picks others.
DEFAULT_METRICS = ("step_success_rate", "action_type_accuracy", "element_accuracy", "argument_match",
                   "invalid_format_rate", "success_rate", "success_low", "success_high", "steps_on_solved",
                   "tokens_per_task")  # fmt: skip


def tracking_uri(value: str) -> str:
    """A local path (``mlruns``) as a file URI; anything with a scheme (``http://``, ``sqlite:///``) as it is."""
    return value if "://" in value or value.startswith("databricks") else Path(value).resolve().as_uri()


def comparison(runs: list, metrics: tuple[str, ...] = DEFAULT_METRICS) -> pl.DataFrame:
    """One row per (model, metric) present in any run, one column per run (``<run name> (<id[:8]>)``)."""
    labels = [f"{run.info.run_name} ({run.info.run_id[:8]})" for run in runs]
    if len(set(labels)) < len(labels):
        raise ValueError(f"the same run was given twice: {labels}")
    cells: dict[tuple[str, str], dict[str, float]] = {}
    for label, run in zip(labels, runs, strict=True):
        for key, value in run.data.metrics.items():
            if not key.startswith(PREFIX) or key.count("/") != 2:
                continue
            _, model, metric = key.split("/")
            if metric in metrics:
                cells.setdefault((model, metric), {})[label] = value
    if not cells:
        raise ValueError(
            "none of these runs logged a model comparison (model_comparison/<model>/<metric> metrics): "
            "compare runs that ran the evaluate pipeline with tracking on"
        )
    models = list(dict.fromkeys(model for model, _ in cells))
    rows = [
        {"model": model, "metric": metric, **{label: cells[(model, metric)].get(label) for label in labels}}
        for model in models
        for metric in metrics
        if (model, metric) in cells
    ]
    return pl.DataFrame(
        rows, schema={"model": pl.String, "metric": pl.String, **dict.fromkeys(labels, pl.Float64)}
    )


def differing_params(runs: list) -> pl.DataFrame:
    """The MLflow parameters whose values are not the same in every run (absent: null)."""
    labels = [f"{run.info.run_name} ({run.info.run_id[:8]})" for run in runs]
    keys = sorted({key for run in runs for key in run.data.params})
    rows = []
    for key in keys:
        values = [run.data.params.get(key) for run in runs]
        if len(set(values)) > 1:
            rows.append({"parameter": key, **dict(zip(labels, values, strict=True))})
    return pl.DataFrame(rows, schema={"parameter": pl.String, **dict.fromkeys(labels, pl.String)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rmsweb_kedro.runs.compare", description=__doc__.split("\n")[0]
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_ID", help="two or more MLflow run ids")
    parser.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI", "mlruns"),
                        help="where the runs are (default: $MLFLOW_TRACKING_URI, else ./mlruns)")  # fmt: skip
    parser.add_argument("--metrics", default=",".join(DEFAULT_METRICS), help="comparison columns to show")
    args = parser.parse_args(argv)
    if len(args.runs) < 2:
        parser.error("give at least two run ids")
    os.environ.setdefault(
        "MLFLOW_ALLOW_FILE_STORE", "true"
    )  # the project's mlruns/ is a file store (mlflow.yml)
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=tracking_uri(args.tracking_uri))
    try:
        runs = [client.get_run(run_id) for run_id in args.runs]
    except MlflowException as err:
        print(f"{args.tracking_uri}: {err.message}", file=sys.stderr)
        return 2
    try:
        table = comparison(runs, tuple(m.strip() for m in args.metrics.split(",") if m.strip()))
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    with pl.Config(tbl_formatting="MARKDOWN", tbl_hide_column_data_types=True, tbl_hide_dataframe_shape=True,
                   tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=80):  # fmt: skip
        print("Model comparison (rates as fractions)\n")
        print(table)
        params = differing_params(runs)
        print("\nParameters that differ\n")
        print(params if params.height else "(none: the runs had the same parameters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
