"""Nodes of ``sft_data``: successful trajectories -> one policy state per step, split by task, with stats (the
library: :mod:`rmsweb_kedro.states`)."""

from __future__ import annotations

from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro import states
from rmsweb_kedro.prompts import PromptConfig


class SFTDataParams(BaseModel):
    """``params:sft_data`` (conf/base/parameters_sft_data.yml)."""

    model_config = ConfigDict(extra="forbid")

    val_fraction: float = Field(default=0.2, ge=0, lt=1, description="share of tasks held out")
    seed: int = 0
    #: The prompt the stats measure: globals.yml's policy_prompt, the one SFT trains with.
    prompt: PromptConfig = Field(default_factory=PromptConfig)


def build_states(shortened_trajectories: pl.DataFrame, shortened_steps: pl.DataFrame) -> pl.DataFrame:
    """One STATE row per step of each successful trajectory; a step of a successful trajectory whose action did
    not parse stops the run with its ids (:func:`rmsweb_kedro.states.from_trajectories`)."""
    return states.from_trajectories(shortened_trajectories, shortened_steps)


def split_by_task(sft_states: pl.DataFrame, params: dict[str, Any]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Train and val states with no task on both sides (``val_fraction`` of the tasks held out, seeded)."""
    config = SFTDataParams.model_validate(params)
    return states.split_by_task(sft_states, config.val_fraction, config.seed)


def describe_states(train: pl.DataFrame, val: pl.DataFrame, params: dict[str, Any]) -> dict[str, Any]:
    """Samples, tasks, approximate tokens and the truncation rate of each split under the prompt (``sft_metrics``
    has the exact token counts); raises when a task is on both sides."""
    config = SFTDataParams.model_validate(params)
    return states.describe(train, val, config.prompt)
