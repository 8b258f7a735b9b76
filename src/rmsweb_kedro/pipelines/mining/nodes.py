"""Nodes of the ``mining`` pipeline: probe the SFT policy offline (K samples on corpus states) and online (rollouts
in the sandbox), keep the critical states, summarise failure modes. The pure rules live in ``rmsweb_kedro.mining``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rmsweb_kedro.agents.factory import PolicySpec
from rmsweb_kedro.mining import (
    CRITICAL_STATE_SCHEMA,
    MINED_COLUMNS,
    FailureMode,
    concentration,
    deduplicate_states,
    select_states,
    unseen_states,
)
from rmsweb_kedro.reporting import figure_panels
from rmsweb_kedro.schema import STATE_SCHEMA, conform_states
from rmsweb_kedro.scoring import ScoringConfig

logger = logging.getLogger(__name__)


class OnlineParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rollouts: int = Field(
        default=4, ge=0, description="policy rollouts on train tasks (0: no online probing)"
    )
    max_steps: int = Field(default=12, ge=1)
    envs: int = Field(default=1, ge=1, description="browsers rolling out at once (params:rollouts backend)")
    split: str = "train"
    headless: bool = True
    sandbox_seed: int = 0  # the sandbox world served (the one the tasks were generated for; globals.yml)
    #: where the rollouts' screenshots are kept (one folder per rollout), so online states carry their image
    #: like corpus states: their ``screenshot`` is the path from the prompt's ``image_root`` to the file
    screenshot_root: str = "data/07_model_output/mining/online_screenshots"


class MiningParams(BaseModel):
    """``params:mining`` (conf/base/parameters_mining.yml); every knob of probing and selection."""

    model_config = ConfigDict(extra="forbid")

    #: how a probed state is scored: ``k`` sampled actions for competence (at least one), their sampling, the
    #: batch, the repeat window of the failure modes; its ``seed`` is the stage's unless the block names one
    scoring: ScoringConfig = Field(default_factory=lambda: ScoringConfig(k=4))
    #: the SFT policy: kind hf (sft_model in this process) or openai (it served), with the prompt SFT trained
    #: with; its batch_size and max_new_tokens are the scoring block's.
    policy: PolicySpec = Field(default_factory=PolicySpec)
    competence_threshold: float = Field(
        default=0.5, gt=0, le=1, description="critical: competence below this"
    )
    ballast_share: float = Field(
        default=0.2, ge=0, lt=1, description="share of routine states in the mined set"
    )
    cap: int | None = Field(default=2000, ge=1, description="most states in the mined set")
    dedup: bool = True
    max_states_probed: int | None = Field(
        default=200, ge=1, description="offline states probed, drawn at random"
    )
    rl_corpus: Literal["mined", "full"] = "mined"
    seed: int = 0
    online: OnlineParams = Field(default_factory=OnlineParams)

    @model_validator(mode="after")
    def _scoring_samples(self) -> MiningParams:
        if self.scoring.k < 1:
            raise ValueError(
                f"mining.scoring.k is {self.scoring.k}: competence is the share of k sampled actions, so k >= 1"
            )
        if self.scoring.seed is None:
            self.scoring = self.scoring.model_copy(update={"seed": self.seed})
        return self


def load_policy(sft_model: Any, params: MiningParams, greedy: bool = False):
    """The SFT policy ``params.policy`` asks for (agents.factory.build_policy: ``hf`` over ``sft_model``, a
    ``(model, processor)`` pair or a checkpoint directory, or ``openai``, it served), prompting exactly as SFT
    trained it (``policy.prompt``: ``${globals:policy_prompt}``); ``greedy`` is how it acts in rollouts, probing
    chooses per call."""
    from rmsweb_kedro.agents.factory import build_policy

    scoring = params.scoring
    # batch_size states of k samples each in one generate call (or that many requests at once)
    spec = params.policy.model_copy(
        update={"batch_size": scoring.batch_size * scoring.k, "max_new_tokens": scoring.max_new_tokens}
    )
    return build_policy(spec, sft_model, greedy=greedy, temperature=scoring.temperature, top_p=scoring.top_p)


def prepare_corpus(states: pl.DataFrame, params: dict[str, Any]) -> pl.DataFrame:
    """The offline corpus: STATE rows, de-duplicated when ``mining.dedup`` (``n_copies`` counts folded copies)."""
    config = MiningParams.model_validate(params)
    states = conform_states(states, "sft_states_train").select(STATE_SCHEMA.names())
    corpus = (
        deduplicate_states(states)
        if config.dedup
        else states.with_columns(pl.lit(1, pl.Int32).alias("n_copies"))
    )
    logger.info("mining corpus: %d states (%d before de-duplication)", corpus.height, states.height)
    return corpus


def probe_states(
    policy: Any, states: pl.DataFrame, params: MiningParams, progress: bool = True
) -> pl.DataFrame:
    """``states`` with the probe columns: K samples and the greedy action per state, scored by
    :func:`rmsweb_kedro.scoring.score_states` (competence and failure mode from them). Unparseable reference
    actions raise naming the state."""
    from rmsweb_kedro.scoring import score_states

    scored = score_states(states.to_dicts(), policy, params.scoring, progress=progress)
    probes = scored.select(
        "n_samples",
        "competence",
        pl.col("predicted_action").alias("greedy_action"),
        "step_success",
        "failure_mode",
        "sampled_actions",
    )
    return pl.concat([states, probes], how="horizontal").cast(dict(_probe_schema()))


def _probe_schema() -> pl.Schema:
    names = ("n_samples", "competence", "greedy_action", "step_success", "failure_mode", "sampled_actions")
    return pl.Schema({name: MINED_COLUMNS[name] for name in names})


def probe_offline(corpus: pl.DataFrame, sft_model: Any, params: dict[str, Any]) -> pl.DataFrame:
    """Probe up to ``max_states_probed`` corpus states (drawn at random with the seed); the other rows keep null
    probe columns. Adds ``source = "offline"``."""
    config = MiningParams.model_validate(params)
    n_probed = min(corpus.height, config.max_states_probed or corpus.height)
    chosen = corpus.with_row_index("_row").sample(n=n_probed, seed=config.seed, shuffle=True)
    started = time.perf_counter()
    probed = probe_states(load_policy(sft_model, config), chosen.drop("_row"), config)
    elapsed = time.perf_counter() - started
    logger.info(
        "probed %d states in %.1f s (%.2f states/s, K=%d)",
        n_probed,
        elapsed,
        n_probed / elapsed,
        config.scoring.k,
    )
    probed = probed.with_columns(chosen["_row"])
    rest = corpus.with_row_index("_row").join(chosen.select("_row"), on="_row", how="anti")
    return (
        pl.concat([probed, rest], how="diagonal_relaxed")
        .sort("_row")
        .drop("_row")
        .with_columns(pl.lit("offline").alias("source"))
    )


def select_critical_states(
    offline: pl.DataFrame, online: pl.DataFrame, params: dict[str, Any]
) -> pl.DataFrame:
    """``critical_states``: with ``rl_corpus: mined`` the critical states (offline and online) plus routine
    ballast, capped; with ``rl_corpus: full`` every offline corpus state (probed or not). States whose failure was
    the environment's are never selected."""
    config = MiningParams.model_validate(params)
    if config.rl_corpus == "full":
        chosen = offline.with_columns(pl.lit("full").alias("selection"))
    else:
        # an online state identical to a probed corpus state is that state: counted once, as offline
        online = unseen_states(online, offline.filter(pl.col("competence").is_not_null()))
        candidates = pl.concat([offline, online], how="diagonal_relaxed").filter(
            pl.col("failure_mode").fill_null("") != FailureMode.ENVIRONMENT_ERROR.value
        )
        chosen = select_states(
            candidates,
            competence_threshold=config.competence_threshold,
            ballast_share=config.ballast_share,
            cap=config.cap,
            seed=config.seed,
        )
    return chosen.select(CRITICAL_STATE_SCHEMA.names()).cast(dict(CRITICAL_STATE_SCHEMA))


def summarize_failure_modes(
    offline: pl.DataFrame, online: pl.DataFrame, online_rollouts: dict[str, Any], params: dict[str, Any]
) -> pl.DataFrame:
    """``failure_modes``: per source and failure mode (every mode listed, zeros included), the number of critical
    states, their share of the source's critical states and mean competence. The online ``environment_error`` row
    counts the rollouts the environment failed (they leave no state)."""
    config = MiningParams.model_validate(params)
    probed = pl.concat([offline, online], how="diagonal_relaxed").filter(
        pl.col("competence").is_not_null() & (pl.col("competence") < config.competence_threshold)
    )
    grid = pl.DataFrame(
        [(source, mode.value) for source in ("offline", "online") for mode in FailureMode],
        schema={"source": pl.String, "failure_mode": pl.String},
        orient="row",
    )
    counts = probed.group_by("source", "failure_mode").agg(
        pl.len().alias("n_states"), pl.col("competence").mean().alias("mean_competence")
    )
    env_failed = online_rollouts.get("env_error", 0)
    if env_failed:
        env_row = {
            "source": "online",
            "failure_mode": FailureMode.ENVIRONMENT_ERROR.value,
            "n_states": env_failed,
        }
        counts = pl.concat([counts, pl.DataFrame([env_row])], how="diagonal_relaxed")
    table = grid.join(counts, on=["source", "failure_mode"], how="left").with_columns(
        pl.col("n_states").fill_null(0).cast(pl.Int64)
    )
    return table.with_columns(
        (pl.col("n_states") / pl.col("n_states").sum().over("source")).fill_nan(0.0).alias("share")
    ).select("source", "failure_mode", "n_states", "share", "mean_competence")


def plot_failure_modes(failure_modes: pl.DataFrame):
    """A grouped bar plot of critical states per failure mode, offline and online side by side."""
    modes = [mode.value for mode in FailureMode]
    figure, (axis,) = figure_panels(panel_size=(9, 4))
    width = 0.4
    for offset, source in ((-width / 2, "offline"), (width / 2, "online")):
        counts = dict(
            failure_modes.filter(pl.col("source") == source).select("failure_mode", "n_states").iter_rows()
        )
        axis.bar(
            [i + offset for i in range(len(modes))], [counts.get(m, 0) for m in modes], width, label=source
        )
    axis.set_xticks(range(len(modes)), [m.replace("_", " ") for m in modes], rotation=30, ha="right")
    axis.set_ylabel("critical states")
    axis.set_title("Failure modes of the SFT policy on critical states")
    axis.legend()
    figure.tight_layout()
    return figure


def report_mining(
    offline: pl.DataFrame,
    online: pl.DataFrame,
    critical_states: pl.DataFrame,
    online_stats: dict[str, Any],
    params: dict[str, Any],
) -> dict[str, Any]:
    """``mining_report``: corpus size and duplicates, competence, how concentrated the RL set is (share of routine
    states in the corpus against the mined set), counts by selection and source, the online rollouts, params."""
    config = MiningParams.model_validate(params)
    probed_online = online.filter(pl.col("competence").is_not_null())
    return {
        "params": config.model_dump(),
        "corpus_states": int(offline.height),
        "corpus_states_before_dedup": int(offline["n_copies"].sum()) if offline.height else 0,
        "offline_probed": int(offline["competence"].is_not_null().sum()),
        "online_states": int(probed_online.height),
        "critical_in_corpus": int((offline["competence"] < config.competence_threshold).sum()),
        "concentration": concentration(offline, critical_states, config.competence_threshold),
        "selected": {
            f"{selection}/{source}": int(n)
            for selection, source, n in critical_states.group_by("selection", "source")
            .len()
            .sort("selection", "source")
            .iter_rows()
        },
        "online_rollouts": online_stats,
    }


def _with_mining_columns(probed: pl.DataFrame, source: str) -> pl.DataFrame:
    return probed.with_columns(pl.lit(1, pl.Int32).alias("n_copies"), pl.lit(source).alias("source"))


def probe_online(
    sandbox_tasks: pl.DataFrame,
    references: pl.DataFrame,
    sft_model: Any,
    params: dict[str, Any],
    rollouts: dict[str, Any] | None = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Greedy rollouts of the SFT policy on ``online.rollouts`` tasks of ``online.split`` that have a successful
    reference, in the real sandbox (served with ``online.sandbox_seed``, the world the tasks were made for) on the
    ``rollouts`` backend; the first divergence of each failed rollout becomes a STATE row with the reference
    action, probed like an offline state (its screenshot kept under ``online.screenshot_root``). Returns the
    probed states and the rollouts' counts."""
    from rmsweb_kedro.agents.scripted import SandboxJudge
    from rmsweb_kedro.mining import divergence_states
    from rmsweb_kedro.prompts import PromptConfig
    from rmsweb_kedro.rollouts import EpisodeSpec, Roles, run_rollouts
    from rmsweb_kedro.schema import tasks_from_frame, trajectory_row

    config = MiningParams.model_validate(params)
    empty = _with_mining_columns(pl.DataFrame(schema={**STATE_SCHEMA, **_probe_schema()}), "online")
    referenced = set(references["task_id"].unique().to_list())
    candidates = [
        t for t in tasks_from_frame(sandbox_tasks) if t.split == config.online.split and t.id in referenced
    ]
    if config.online.rollouts == 0 or not candidates:
        logger.info(
            "online probing skipped: %d rollouts asked, %d tasks with references",
            config.online.rollouts,
            len(candidates),
        )
        return empty, {"rollouts": 0}
    import random

    tasks = random.Random(config.seed).sample(candidates, min(config.online.rollouts, len(candidates)))
    policy = load_policy(sft_model, config, greedy=True)
    shots = Path(config.online.screenshot_root).resolve()
    image_root = Path(PromptConfig.model_validate(config.policy.prompt).image_root or ".").resolve()
    episodes = [
        EpisodeSpec(
            key=task.id,
            task=task,
            max_steps=config.online.max_steps,
            trajectory_id=f"mining-online__{task.id}",
            screenshot_dir=str(shots / f"mining-online__{task.id}"),
            relative_to=str(shots),
        )
        for task in tasks
    ]
    trajectories = [
        trajectory
        for (trajectory,) in run_rollouts(
            episodes,
            Roles(agent=lambda _seed: policy, judge=lambda server: SandboxJudge(server.session_state)),
            rollouts,
            browsers=config.online.envs,
            browser={"headless": config.online.headless},
            sandbox_seed=config.online.sandbox_seed,
            progress="policy rollouts",
        )
    ]
    prefix = f"{Path(os.path.relpath(shots, image_root)).as_posix()}/"
    states, counts = divergence_states(trajectories, {t.id: t for t in tasks}, references, prefix)
    probed = _with_mining_columns(probe_states(policy, states, config), "online") if states.height else empty
    columns = ("trajectory_id", "task_id", "success", "termination", "n_steps")
    per_rollout = [{k: v for k, v in trajectory_row(r).items() if k in columns} for r in trajectories]
    logger.info("online probing: %s", counts)
    return probed, {**counts, "episodes": per_rollout}
