"""Policy states (``schema.STATE_SCHEMA`` rows) from the trajectory tables: one per step of each successful
trajectory, what the teacher saw and the action it took; the split of states by task (train, val, the probe pool
mining probes but SFT never trains on, and the dev split Salvage-DS chooses its checkpoint on); their size as
prompts."""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

import polars as pl

from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages, reference_reply
from rmsweb_kedro.contracts.schema import STATE_SCHEMA, STEP_SCHEMA, TRAJECTORY_SCHEMA

logger = logging.getLogger(__name__)


def _require_columns(frame: pl.DataFrame, schema: pl.Schema, name: str) -> None:
    missing = [c for c in schema.names() if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing columns {missing} (expected schema.{name.upper()}_SCHEMA)")


def from_trajectories(trajectories: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """One STATE row per step of each successful trajectory: what the teacher saw and the action it took.

    ``previous_actions`` holds every earlier action, ``previous_thoughts`` and ``previous_screenshots`` their
    thoughts and screenshots beside them (the context policy chooses what the prompt shows: prompts.PromptConfig).
    A step whose action did not parse cannot be a target; it is an error in a successful trajectory, so it stops
    the run with its ids.
    """
    _require_columns(trajectories, TRAJECTORY_SCHEMA, "trajectory")
    _require_columns(steps, STEP_SCHEMA, "step")
    successful = trajectories.filter(pl.col("success").fill_null(False))
    steps = steps.join(successful.select("trajectory_id", "site", "instruction"), on="trajectory_id").sort(
        "trajectory_id", "index"
    )
    unparsed = steps.filter(pl.col("action").is_null())
    if unparsed.height:
        first = unparsed.row(0, named=True)
        raise ValueError(
            f"shortened_steps: {unparsed.height} step(s) of successful trajectories have no action, e.g. "
            f"trajectory {first['trajectory_id']!r} step {first['index']} (field 'action')"
        )
    states = steps.with_columns(
        pl.concat_str("trajectory_id", pl.lit(":"), pl.col("index").cast(pl.String)).alias("state_id"),
        pl.col("index").cast(pl.Int32).alias("step_index"),
        pl.col("action").cum_count().over("trajectory_id").alias("_n"),
        pl.col("action").implode().over("trajectory_id").alias("_actions"),
        pl.col("thought").implode().over("trajectory_id").alias("_thoughts"),
        pl.col("screenshot").implode().over("trajectory_id").alias("_screenshots"),
        pl.col("thought").alias("reference_thought"),
        pl.col("action").alias("reference_action"),
        pl.col("equivalent_actions").fill_null([]),
    ).with_columns(
        pl.col(f"_{column}").list.head(pl.col("_n") - 1).alias(f"previous_{column}")
        for column in ("actions", "thoughts", "screenshots")
    )
    states = states.select(STATE_SCHEMA.names()).cast(dict(STATE_SCHEMA))
    logger.info(
        "%d states from %d successful trajectories (of %d)",
        states.height,
        successful.height,
        trajectories.height,
    )
    return states


def _task_rank(task_id: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()


def split_by_task(
    states: pl.DataFrame, held_out: float | Mapping[str, int], seed: int, min_train_tasks: int = 0
) -> tuple[pl.DataFrame, ...]:
    """Holding out whole tasks, the one way: ``(train, *parts)``, each task in exactly one part.

    ``held_out`` is named task counts in order (sft_data's ``{"val": 24, "probe": 32, "dev": 16}``:
    ``(train, val, probe, dev)``) or one fraction of the tasks (``(train, held_out)``: Salvage-DS's critical states;
    ``round(n * fraction)`` tasks, at least one when the fraction is positive and two tasks are there). Tasks go in a
    seeded hash order (SHA-256 of ``seed:task_id``); each held-out part in order takes the next ``count`` tasks, the
    rest is train. So a part never moves a task in or out of the parts before it: val is the same at every probe and
    dev count, the probe pool at every dev count. Fewer than ``min_train_tasks`` tasks left to train raises, naming
    the counts: a part is never cut short to make room."""
    tasks = sorted(states["task_id"].unique().to_list(), key=lambda t: _task_rank(t, seed))
    counts = dict(held_out) if isinstance(held_out, Mapping) else {"held_out": _count(len(tasks), held_out)}
    left = len(tasks) - sum(counts.values())
    if left < max(min_train_tasks, 0):
        asked = " + ".join(f"{name} {count}" for name, count in counts.items())
        raise ValueError(
            f"{len(tasks)} tasks to split: {asked} held out leave {left} to train, min_train_tasks is "
            f"{min_train_tasks}: collect more tasks or hold fewer out"
        )
    parts, start = {}, 0
    for name, count in counts.items():
        parts[name] = tasks[start : start + count]
        start += count
    frames = [states.filter(pl.col("task_id").is_in(chosen)) for chosen in parts.values()]
    train = states.filter(~pl.col("task_id").is_in(tasks[:start]))
    logger.info(
        "split by task: %d train states (%d tasks), %s",
        train.height,
        left,
        ", ".join(
            f"{f.height} {name} states ({len(parts[name])} tasks)"
            for name, f in zip(parts, frames, strict=True)
        ),
    )
    return train, *frames


def _count(tasks: int, fraction: float) -> int:
    """``round(tasks * fraction)``, at least one when the fraction is positive and two tasks are there."""
    if not 0 <= fraction < 1:
        raise ValueError(f"held-out fraction {fraction:g} must be in [0, 1): a task must be left to train on")
    count = round(tasks * fraction)
    return max(1, count) if fraction > 0 and tasks >= 2 else count


def describe(parts: dict[str, pl.DataFrame], prompt: PromptConfig) -> dict[str, Any]:
    """Samples, tasks, approximate tokens (4 characters a token: the tokenizer is built later, in ``sft``), the
    share of observations cut to the prompt's budget and the past steps its history budget cut, per part
    (``train``, ``val``, ``probe``, ...); raises when a task is in two parts."""
    stats: dict[str, Any] = {"prompt": prompt.model_dump()}
    for name, frame in parts.items():
        rows = frame.to_dicts()
        built = [build_messages(row, prompt, with_reference=True) for row in rows]
        chars = [sum(len(p.get("text", "")) for m in msgs for p in m["content"]) for msgs, _ in built]
        target_chars = [len(reference_reply(row, prompt)) for row in rows]
        stats[name] = {
            "samples": len(rows),
            "tasks": frame["task_id"].n_unique(),
            "trajectories": frame["trajectory_id"].n_unique(),
            "approx_tokens": sum(chars) // 4,
            "approx_target_tokens": sum(target_chars) // 4,
            "mean_approx_tokens": (sum(chars) / 4 / len(rows)) if rows else 0.0,
            "truncation_rate": (sum(info["truncated"] for _, info in built) / len(rows)) if rows else 0.0,
            # past steps the history budget (prompt.history_max_tokens) cut, oldest first, and the states it cut
            "history_steps_cut": sum(info["history_cut"] for _, info in built),
            "history_cut_states": sum(info["history_cut"] > 0 for _, info in built),
            "action_types": dict(Counter(row["reference_action"].split("(")[0] for row in rows)),
        }
    names = list(parts)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            overlap = set(parts[first]["task_id"].to_list()) & set(parts[second]["task_id"].to_list())
            if overlap:
                raise ValueError(f"tasks in both {first} and {second}: {sorted(overlap)[:5]}")
    return stats
