"""Nodes of the tasks pipeline: generate the sandbox suite and summarise it; assemble the ``tasks`` table of the
configured sources (:mod:`rmsweb_kedro.tasks.sources`)."""

from __future__ import annotations

import logging
from typing import Any

import polars as pl

from rmsweb_kedro.contracts.schema import tasks_to_frame
from rmsweb_kedro.measures.reporting import figure_panels
from rmsweb_kedro.tasks.sources import TasksParams, assemble
from rmsweb_kedro.web.sandbox.tasks import SandboxParams, generate_tasks

logger = logging.getLogger(__name__)


def generate_sandbox_tasks(params: dict[str, Any]) -> pl.DataFrame:
    """Every template instance of the sandbox sites as a ``tasks`` table (schema.TASK_SCHEMA)."""
    config = SandboxParams(**params)
    tasks = generate_tasks(config)
    logger.info("Generated %d sandbox tasks (split mode %s)", len(tasks), config.split_mode)
    return tasks_to_frame(tasks)


def assemble_tasks(
    sandbox_tasks: pl.DataFrame, params: dict[str, Any]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The ``tasks`` table of ``params:tasks.sources`` (the sandbox suite alone by default, row for row), the
    quarantined rows of the task files (file, line, field, reason) and the per-file counts."""
    return assemble(sandbox_tasks, TasksParams.model_validate(params))


def summarise_sandbox_tasks(tasks: pl.DataFrame) -> pl.DataFrame:
    """Task counts and mean reference length by site, split and level."""
    return (
        tasks.group_by("site", "split", "level")
        .agg(
            pl.len().alias("tasks"), pl.col("reference_length").mean().round(2).alias("mean_reference_length")
        )
        .sort("site", "split", "level")
    )


def plot_sandbox_tasks(summary: pl.DataFrame) -> Any:
    """A stacked bar chart: tasks per site, coloured by split and level."""
    table = summary.with_columns((pl.col("split") + "/" + pl.col("level")).alias("group"))
    sites = sorted(table["site"].unique().to_list())
    groups = sorted(table["group"].unique().to_list())
    figure, (axes,) = figure_panels(panel_size=(9, 4.5))
    bottom = [0] * len(sites)
    for group in groups:
        counts = [
            int(table.filter((pl.col("site") == site) & (pl.col("group") == group))["tasks"].sum())
            for site in sites
        ]
        axes.bar(sites, counts, bottom=bottom, label=group)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    axes.set_ylabel("tasks")
    axes.set_title("Sandbox task suite: tasks per site by split/level")
    axes.legend(fontsize=7, ncols=3)
    figure.tight_layout()
    return figure
