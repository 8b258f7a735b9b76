"""Shortening of successful trajectories: remove detours (actions that did nothing, loops back to a page state
already seen) without changing where a trajectory ends or losing a memorized fact; failed or unjudged trajectories
pass unchanged."""

from __future__ import annotations

import numpy as np
import polars as pl

from rmsweb_kedro.contracts.actions import ActionType
from rmsweb_kedro.contracts.schema import STEP_SCHEMA, TRAJECTORY_SCHEMA

_MEMORIZE = pl.col("action_type") == ActionType.MEMORIZE.value


def _state_key() -> pl.Expr:
    # A page state is its URL and accessibility tree; without a tree the state is unknown and never repeats. A
    # memorize step leaves the page as it was, yet is no loop of one: its fact is carried to every later step, so
    # its state is unknown too (kept).
    known = pl.struct("url", "axtree").hash(seed=0)
    return pl.when(pl.col("axtree").is_null() | _MEMORIZE).then(None).otherwise(known)


def _loop_erased_rows(candidates: pl.DataFrame) -> np.ndarray:
    """Row numbers (into ``candidates``) kept by loop erasure, all trajectories at once.

    From a step's state, jump to the *last* step acting on the same state and keep that one; a revisited state
    means everything in between was a detour, and an action after which the state is unchanged is a loop of one.
    The final step's state has no later repeat, so the trajectory still ends where it ended. No jump crosses a
    memorize step (``segment``: the memorize steps up to each row): a loop that memorized a fact on its way was
    not a detour, whatever page it came back to.
    """
    n = candidates.height
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    row = pl.col("row")
    positions = candidates.with_row_index("row").select(
        last=pl.when(pl.col("state").is_null())
        .then(row)
        .otherwise(row.max().over("trajectory_id", "segment", "state")),
        start=row.min().over("trajectory_id"),
        end=row.max().over("trajectory_id") + 1,
    )
    last = positions["last"].to_numpy().astype(np.int64)
    starts = np.unique(positions["start"].to_numpy().astype(np.int64))
    ends = positions["end"].to_numpy().astype(np.int64)[starts]
    keep = np.zeros(n, dtype=bool)
    cursor = starts
    while cursor.size:  # one round per kept step of the longest trajectory, every trajectory in parallel
        jump = last[cursor]
        keep[jump] = True
        cursor = jump + 1
        alive = cursor < ends
        cursor, ends = cursor[alive], ends[alive]
    return np.flatnonzero(keep)


def shorten(trajectories: pl.DataFrame, steps: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Remove detours from successful trajectories without changing where they end.

    Removed: steps whose action did nothing (it raised an error or did not parse; never the final step), then
    loops (see :func:`_loop_erased_rows`). Failed or unjudged trajectories pass unchanged. Kept steps are
    re-indexed 0, 1, 2, ...; ``n_steps`` is updated.
    """
    successful = trajectories.filter(pl.col("success").fill_null(False))["trajectory_id"]
    ordered = steps.sort("trajectory_id", "index", maintain_order=True).with_columns(
        is_success=pl.col("trajectory_id").is_in(successful.implode()),
        is_final=pl.col("index") == pl.col("index").max().over("trajectory_id"),
    )
    did_nothing = (pl.col("error").is_not_null() | pl.col("action").is_null()) & ~pl.col("is_final")
    candidates = ordered.filter(pl.col("is_success") & ~did_nothing).with_columns(
        state=_state_key(), segment=_MEMORIZE.cast(pl.Int32).cum_sum().over("trajectory_id")
    )
    kept = candidates[_loop_erased_rows(candidates)]
    shortened_steps = (
        pl.concat([ordered.filter(~pl.col("is_success")), kept.drop("state", "segment")])
        .sort("trajectory_id", "index", maintain_order=True)
        .with_columns(index=pl.int_range(pl.len(), dtype=pl.Int32).over("trajectory_id"))
        .select(STEP_SCHEMA.names())
    )
    lengths = shortened_steps.group_by("trajectory_id").agg(new_steps=pl.len().cast(pl.Int32))
    shortened_trajectories = (
        trajectories.join(lengths, on="trajectory_id", how="left", maintain_order="left")
        .with_columns(n_steps=pl.col("new_steps").fill_null(0))
        .select(TRAJECTORY_SCHEMA.names())
    )
    return shortened_trajectories, shortened_steps


def shortening_report(trajectories: pl.DataFrame, shortened_trajectories: pl.DataFrame) -> pl.DataFrame:
    """Steps before and after shortening per site (successful trajectories only), and the share removed."""
    both = trajectories.filter(pl.col("success").fill_null(False)).join(
        shortened_trajectories.select("trajectory_id", steps_after="n_steps"), on="trajectory_id"
    )
    per_site = both.group_by("site").agg(
        trajectories=pl.len().cast(pl.Int64),
        steps_before=pl.col("n_steps").cast(pl.Int64).sum(),
        steps_after=pl.col("steps_after").cast(pl.Int64).sum(),
    )
    total = per_site.select(
        site=pl.lit("(all)"),
        trajectories=pl.col("trajectories").sum(),
        steps_before=pl.col("steps_before").sum(),
        steps_after=pl.col("steps_after").sum(),
    )
    return (
        pl.concat([per_site.sort("site"), total])
        .with_columns(steps_removed=pl.col("steps_before") - pl.col("steps_after"))
        .with_columns(
            share_removed=pl.when(pl.col("steps_before") > 0)
            .then(pl.col("steps_removed") / pl.col("steps_before"))
            .otherwise(0.0)
        )
    )
