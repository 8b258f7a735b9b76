"""Nodes of ``sft_data``: successful trajectories -> one policy state per step, split by task into train, val, the
probe pool (states mining probes that SFT never trains on) and dev (the states Salvage-DS chooses its checkpoint
on, which nothing trains or evaluates on), with stats (the library: :mod:`rmsweb_kedro.trajectories.states`)."""

from __future__ import annotations

from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.contracts.prompts import PromptConfig
from rmsweb_kedro.trajectories import states


class SFTDataParams(BaseModel):
    """``params:sft_data`` (conf/base/parameters_sft_data.yml)."""

    model_config = ConfigDict(extra="forbid")

    #: Held-out parts as task counts, taken in this order (val, probe, dev), so SFT trains on what collection adds.
    val_tasks: int = Field(
        default=24, ge=0, description="tasks held out for validation and offline evaluation"
    )
    #: Tasks held out of SFT for mining to probe (``sft_states_probe``); 0: no probe pool.
    probe_tasks: int = Field(default=32, ge=0, description="tasks held out for mining")
    #: Tasks held out of everything but Salvage-DS's checkpoint choice (``sft_states_dev``); 0: no dev split.
    dev_tasks: int = Field(default=16, ge=0, description="tasks held out as dev")
    #: The node fails when fewer tasks are left for SFT (a smaller collection than planned).
    min_train_tasks: int = Field(default=136, ge=1, description="fewest tasks SFT may train on")
    seed: int = 0
    #: The prompt the stats measure: globals.yml's policy_prompt, the one SFT trains with.
    prompt: PromptConfig = Field(default_factory=PromptConfig)


def build_states(shortened_trajectories: pl.DataFrame, shortened_steps: pl.DataFrame) -> pl.DataFrame:
    """One STATE row per step of each successful trajectory; a step of a successful trajectory whose action did
    not parse stops the run with its ids (:func:`rmsweb_kedro.trajectories.states.from_trajectories`)."""
    return states.from_trajectories(shortened_trajectories, shortened_steps)


def split_by_task(
    sft_states: pl.DataFrame, params: dict[str, Any]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Train, val, probe and dev states, each task in exactly one part (``val_tasks``, ``probe_tasks`` and
    ``dev_tasks`` tasks, seeded; :func:`rmsweb_kedro.trajectories.states.split_by_task`); raises, naming the counts,
    when fewer than ``min_train_tasks`` tasks are left to train. A count of 0 leaves its part empty; val and the probe
    pool do not depend on the dev count."""
    config = SFTDataParams.model_validate(params)
    counts = {"val": config.val_tasks, "probe": config.probe_tasks, "dev": config.dev_tasks}
    return states.split_by_task(sft_states, counts, config.seed, config.min_train_tasks)


def describe_states(
    train: pl.DataFrame, val: pl.DataFrame, probe: pl.DataFrame, dev: pl.DataFrame, params: dict[str, Any]
) -> dict[str, Any]:
    """Samples, tasks, approximate tokens and the truncation rate of each part (train, val, probe, dev) under the
    prompt (``sft_metrics`` has the exact token counts), and the counts asked for; raises when a task is in two
    parts."""
    config = SFTDataParams.model_validate(params)
    stats = states.describe({"train": train, "val": val, "probe": probe, "dev": dev}, config.prompt)
    stats["split"] = config.model_dump(
        include={"val_tasks", "probe_tasks", "dev_tasks", "min_train_tasks", "seed"}
    )
    return stats
