"""Nodes of the collect pipeline: pick tasks, collect attempts, publish raw trajectory files, summarise. The
collection itself is :mod:`rmsweb_kedro.episodes.collection`."""

from __future__ import annotations

from typing import Any

import polars as pl

from rmsweb_kedro.contracts.schema import tasks_from_frame, tasks_to_frame
from rmsweb_kedro.episodes import collection
from rmsweb_kedro.episodes.collection import CollectParams
from rmsweb_kedro.measures.reporting import figure_panels
from rmsweb_kedro.models.endpoint import Credentials


def select_collection_tasks(tasks: pl.DataFrame, params: dict[str, Any]) -> pl.DataFrame:
    """The tasks to collect on (of the ``tasks`` table, docs/tasks.md): ``split`` (all when null), at most ``max_tasks`` drawn (seeded) round-robin over
    task templates, so a cap gives every template the same share."""
    config = CollectParams.model_validate(params)
    return tasks_to_frame(tasks_from_frame(collection.select_tasks(tasks, config)))


def collect_trajectories(
    tasks: pl.DataFrame,
    params: dict[str, Any],
    rollouts: dict[str, Any] | None = None,
    credentials: Credentials | None = None,
) -> pl.DataFrame:
    """Run every mode's attempts (resuming from the journal) on the ``rollouts`` backend; one log
    row per attempt, failed ones and environment errors included, each with its full trajectory. ``credentials``:
    Kedro's (``endpoint_credentials``), for OpenAI-compatible roles."""
    config = CollectParams.model_validate(params)
    attempts = collection.collect(tasks_from_frame(tasks), config, rollouts, credentials)
    return collection.collection_log(attempts)


def publish_raw_trajectories(collection_log: pl.DataFrame, params: dict[str, Any]) -> dict[str, str]:
    """Every attempt of the corpus modes as a raw trajectory file (one schema.Trajectory JSON line), by partition;
    a successful retry keeps the reflection before it as metadata (:func:`rmsweb_kedro.episodes.collection.raw_files`)."""
    config = CollectParams.model_validate(params)
    return collection.raw_files(collection_log, config)


def collection_stats(collection_log: pl.DataFrame, params: dict[str, Any]) -> dict[str, Any]:
    """Yield (share of tasks with a verified success), attempts per success, mean/median steps of successful
    trajectories, tokens and cost per verified trajectory: per mode, and per mode and site."""
    config = CollectParams.model_validate(params)
    return collection.summarize(collection_log, config)


def plot_collection(stats: dict[str, Any]) -> Any:
    """Yield by attempt budget, and mean steps of successful trajectories, per mode."""
    figure, (left, right) = figure_panels(2, panel_size=(5, 4))
    modes = stats["modes"]
    for mode, summary in modes.items():
        curve = summary["yield_by_attempt"]
        left.plot(range(1, len(curve) + 1), curve, marker="o", label=mode)
    left.set_xlabel("attempts allowed")
    left.set_ylabel("yield (tasks with a verified success)")
    left.set_ylim(0, 1.05)
    left.legend(fontsize=8)
    names = list(modes)
    right.bar(names, [modes[m]["mean_steps_success"] or 0 for m in names], color="tab:green")
    right.set_ylabel("mean steps of successful trajectories")
    right.tick_params(axis="x", labelsize=8)
    figure.suptitle(f"Collection, R={stats['settings']['attempts_R']}")
    figure.tight_layout()
    return figure
