"""Nodes of the ``trajectories`` pipeline: validate raw trajectory files into tables and a quarantine
(:mod:`rmsweb_kedro.trajectories.ingest`), account for every record, shorten successes (:mod:`rmsweb_kedro.trajectories.shortening`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from rmsweb_kedro.measures.reporting import figure_panels
from rmsweb_kedro.trajectories import ingest, shortening

logger = logging.getLogger(__name__)


def validate_trajectories(
    raw_trajectories: dict[str, Callable[[], bytes | str]], params: dict[str, Any]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """Validate every line of every raw file into ``trajectories``/``steps`` rows or a ``quarantine`` row; also
    returns the counts :func:`report_ingest` checks the tables against."""
    config = ingest.IngestParams.model_validate(params)
    trajectories, steps, quarantine, counts = ingest.validate(raw_trajectories, config)
    if quarantine.height:
        logger.warning("%d raw records quarantined; see the quarantine table", quarantine.height)
    return trajectories, steps, quarantine, counts


def report_ingest(
    trajectories: pl.DataFrame, steps: pl.DataFrame, quarantine: pl.DataFrame, counts: dict[str, Any]
) -> dict[str, Any]:
    """The row-accounting report; raises :class:`rmsweb_kedro.trajectories.ingest.IngestAccountingError` unless records in =
    accepted + quarantined."""
    return ingest.account(trajectories, steps, quarantine, counts)


def shorten_trajectories(
    trajectories: pl.DataFrame, steps: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Successful trajectories without their detours (same end), re-indexed; the others unchanged."""
    return shortening.shorten(trajectories, steps)


def report_shortening(trajectories: pl.DataFrame, shortened_trajectories: pl.DataFrame) -> pl.DataFrame:
    """Steps before and after shortening per site (successful trajectories only), and the share removed."""
    return shortening.shortening_report(trajectories, shortened_trajectories)


def plot_shortening(shortening_report: pl.DataFrame) -> Any:
    """A bar chart of steps before/after shortening per site, with the share removed on top."""
    per_site = shortening_report.filter(pl.col("site") != "(all)")
    figure, (axes,) = figure_panels(panel_size=(max(4, 1.2 * per_site.height + 2), 3.5))
    x = np.arange(per_site.height)
    axes.bar(x - 0.2, per_site["steps_before"], width=0.4, label="before")
    axes.bar(x + 0.2, per_site["steps_after"], width=0.4, label="after")
    for position, (after, share) in enumerate(
        zip(per_site["steps_after"], per_site["share_removed"], strict=True)
    ):
        axes.annotate(f"-{share:.0%}", (position + 0.2, after), ha="center", va="bottom", fontsize=8)
    axes.set_xticks(x, per_site["site"].to_list(), rotation=20)
    axes.set_ylabel("steps (successful trajectories)")
    axes.set_title("Shortening: steps before and after removing detours")
    axes.legend()
    figure.tight_layout()
    return figure
