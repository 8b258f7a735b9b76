"""Nodes of ``sft_data``: successful trajectories -> one policy state per step, split by task into train, val, the
probe pool (states mining probes that SFT never trains on) and dev (the states Salvage-DS chooses its checkpoint
on, which nothing trains or evaluates on), with stats (the library: :mod:`rmsweb_kedro.trajectories.states`)."""

from __future__ import annotations

from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rmsweb_kedro.contracts.prompts import PromptConfig
from rmsweb_kedro.trajectories import states


class SFTDataParams(BaseModel):
    """``params:sft_data`` (conf/base/parameters_sft_data.yml)."""

    model_config = ConfigDict(extra="forbid")

    val_fraction: float = Field(
        default=0.15, ge=0, lt=1, description="share of tasks held out for validation"
    )
    #: Share of tasks held out of SFT for mining to probe (``sft_states_probe``); 0: no probe pool.
    probe_fraction: float = Field(default=0.2, ge=0, lt=1, description="share of tasks held out for mining")
    #: Share of tasks held out of everything for Salvage-DS's checkpoint choice (``sft_states_dev``).
    dev_fraction: float = Field(default=0.1, ge=0, lt=1, description="share of tasks held out as dev")
    seed: int = 0
    #: The prompt the stats measure: globals.yml's policy_prompt, the one SFT trains with.
    prompt: PromptConfig = Field(default_factory=PromptConfig)

    @model_validator(mode="after")
    def _leaves_train_tasks(self) -> SFTDataParams:
        if self.val_fraction + self.probe_fraction + self.dev_fraction >= 1:
            raise ValueError(
                f"sft_data.val_fraction ({self.val_fraction}) + probe_fraction ({self.probe_fraction}) + "
                f"dev_fraction ({self.dev_fraction}) must be < 1, or no task is left to train on: lower one of them"
            )
        return self


def build_states(shortened_trajectories: pl.DataFrame, shortened_steps: pl.DataFrame) -> pl.DataFrame:
    """One STATE row per step of each successful trajectory; a step of a successful trajectory whose action did
    not parse stops the run with its ids (:func:`rmsweb_kedro.trajectories.states.from_trajectories`)."""
    return states.from_trajectories(shortened_trajectories, shortened_steps)


def split_by_task(
    sft_states: pl.DataFrame, params: dict[str, Any]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Train, val, probe and dev states, each task in exactly one part (``val_fraction``, ``probe_fraction`` and
    ``dev_fraction`` of the tasks, seeded; :func:`rmsweb_kedro.trajectories.states.split_by_task`). A fraction of 0
    leaves its part empty; val and the probe pool do not depend on the dev fraction."""
    config = SFTDataParams.model_validate(params)
    fractions = {"val": config.val_fraction, "probe": config.probe_fraction, "dev": config.dev_fraction}
    return states.split_by_task(sft_states, fractions, config.seed)


def describe_states(
    train: pl.DataFrame, val: pl.DataFrame, probe: pl.DataFrame, dev: pl.DataFrame, params: dict[str, Any]
) -> dict[str, Any]:
    """Samples, tasks, approximate tokens and the truncation rate of each part (train, val, probe, dev) under the
    prompt (``sft_metrics`` has the exact token counts), and the fractions asked for; raises when a task is in two
    parts."""
    config = SFTDataParams.model_validate(params)
    stats = states.describe({"train": train, "val": val, "probe": probe, "dev": dev}, config.prompt)
    stats["split"] = config.model_dump(include={"val_fraction", "probe_fraction", "dev_fraction", "seed"})
    return stats
