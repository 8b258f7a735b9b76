"""Probing the SFT policy for failure-mode mining (docs/mining.md): K sampled actions and the greedy one on corpus
states (offline), and greedy rollouts in the sandbox (journaled: a killed run resumes) whose divergences from a
successful reference become states probed the same way (online). Each probed state gets its ``origin``
(``mining.critical_origin``). The mining parameters (``params:mining``) are defined here; the rules that score and
select states are :mod:`rmsweb_kedro.measures.mining`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rmsweb_kedro.agents.factory import PolicySpec, managed_policy
from rmsweb_kedro.contracts.prompts import PromptConfig
from rmsweb_kedro.contracts.schema import (
    EPISODE_STEP_SCHEMA,
    STATE_SCHEMA,
    Task,
    episode_step_rows,
    trajectory_row,
)
from rmsweb_kedro.contracts.seeding import pool_first, sample_rows, seeded_rng
from rmsweb_kedro.episodes.rollouts import Journal, fingerprint
from rmsweb_kedro.judges.choice import JudgeSpecConfig
from rmsweb_kedro.measures.mining import (
    CRITICAL_ORIGINS,
    MINED_COLUMNS,
    divergence_states,
    rollout_failure_modes,
    with_in_sft,
    with_origins,
)
from rmsweb_kedro.measures.scoring import ScoringConfig, score_states

logger = logging.getLogger(__name__)

#: The columns a probe adds to a STATE row (types: mining.MINED_COLUMNS).
PROBE_SCHEMA = pl.Schema(
    {
        name: MINED_COLUMNS[name]
        for name in (
            "n_samples",
            "competence",
            "greedy_action",
            "step_success",
            "failure_mode",
            "sampled_actions",
        )
    }
)


class OnlineParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: policy rollouts on tasks of ``split`` with a reference, one a task (0: no online probing); ``all``: every
    #: such task
    rollouts: Annotated[int, Field(ge=0)] | Literal["all"] = 40
    max_steps: int = Field(default=12, ge=1)
    envs: int = Field(default=2, ge=1, description="browsers rolling out at once (params:rollouts backend)")
    split: str = "train"
    #: roll out on tasks of the probe pool (held out of SFT: its references are ``in_sft`` false) first, then on
    #: tasks SFT trained on; false: one seeded draw over both
    probe_pool_first: bool = True
    #: the states a failed rollout gives (mining.divergences): ``first``, its first divergence from the
    #: references; ``every_page``, the first divergence on each page state a reference reached (on-policy states
    #: after the policy's own mistakes)
    divergences: Literal["first", "every_page"] = "every_page"
    headless: bool = True
    sandbox_seed: int = 0  # the sandbox world served (the one the tasks were generated for; globals.yml)
    #: where the rollouts' screenshots are kept (one folder per rollout), so online states carry their image
    #: like corpus states: their ``screenshot`` is the path from the prompt's ``image_root`` to the file
    screenshot_root: str = "data/07_model_output/mining/online_screenshots"
    #: every finished rollout is appended here (``episodes.rollouts.Journal``, found by task); a re-run with the
    #: same checkpoint and settings takes the rollouts it holds, so a killed run loses only those in flight
    #: (null: no journal)
    journal_path: str | None = "data/07_model_output/mining/online_journal.jsonl"
    #: the judge of tasks without a programmatic checker (judges.choice: sandbox tasks keep the sandbox checker
    #: unless this names an LLM judge); an LLM judge needs its endpoint (the API key from ``api_key_env``)
    judge: JudgeSpecConfig = Field(default_factory=JudgeSpecConfig)


class MiningParams(BaseModel):
    """``params:mining`` (conf/base/parameters_mining.yml); every knob of probing and selection."""

    model_config = ConfigDict(extra="forbid")

    #: how a probed state is scored: ``k`` sampled actions for competence (at least one), their sampling, the
    #: batch, the repeat window of the failure modes; its ``seed`` is the stage's unless the block names one
    scoring: ScoringConfig = Field(default_factory=lambda: ScoringConfig(k=4))
    #: the SFT policy: kind hf (sft_model in this process) or openai (it served), with the prompt SFT trained
    #: with; its batch_size and max_new_tokens are the scoring block's.
    policy: PolicySpec = Field(default_factory=PolicySpec)
    #: policy.server: the managed server's logs, ``<server_logs>/<offline|online>.log``
    server_logs: str = "data/07_model_output/mining/servers"
    competence_threshold: float = Field(
        default=0.5, gt=0, le=1, description="critical: competence below this"
    )
    ballast_share: float = Field(
        default=0.2, ge=0, lt=1, description="share of routine states in the mined set"
    )
    cap: int | None = Field(default=2000, ge=1, description="most states in the mined set")
    dedup: bool = True
    max_states_probed: int | None = Field(
        default=300, ge=1, description="offline states probed, the probe pool first"
    )
    #: probe every state of the probe pool (held out of SFT: ``in_sft`` false) first, then fill
    #: ``max_states_probed`` with states SFT trained on; false: one seeded draw over both
    probe_pool_first: bool = True
    rl_corpus: Literal["mined", "full"] = "mined"
    #: the origins that make a probed state critical (mining.Origin; precedence online_divergence > greedy_wrong >
    #: samples_spread whatever the order here): the ablations choose among them
    critical: list[Literal["online_divergence", "greedy_wrong", "samples_spread"]] = Field(
        default_factory=lambda: [o.value for o in CRITICAL_ORIGINS], min_length=1
    )
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


@contextmanager
def acting_policy(sft_model: Any, params: MiningParams, part: str, greedy: bool = False) -> Iterator[Any]:
    """:func:`load_policy` for the ``with`` block; with ``policy.server`` the SFT checkpoint served by a vLLM
    server started for the block and stopped after (agents.factory.managed_policy; served as ``sft``, its log
    ``<server_logs>/<part>.log``)."""
    log = Path(params.server_logs) / f"{part}.log"
    where = "mining.policy.server"
    with managed_policy(params.policy, sft_model, name="sft", log_path=log, where=where) as (
        spec,
        checkpoint,
    ):
        yield load_policy(checkpoint, params.model_copy(update={"policy": spec}), greedy)


def probe_states(
    policy: Any, states: pl.DataFrame, params: MiningParams, progress: bool = True
) -> pl.DataFrame:
    """``states`` with the probe columns: K samples and the greedy action per state, scored by
    :func:`rmsweb_kedro.measures.scoring.score_states` (competence and failure mode from them). Unparseable reference
    actions raise naming the state."""
    scored = score_states(states.to_dicts(), policy, params.scoring, progress=progress)
    probes = scored.select(
        "n_samples",
        "competence",
        pl.col("predicted_action").alias("greedy_action"),
        "step_success",
        "failure_mode",
        "sampled_actions",
    )
    return pl.concat([states, probes], how="horizontal").cast(dict(PROBE_SCHEMA))


def probed_rows(corpus: pl.DataFrame, config: MiningParams) -> pl.DataFrame:
    """The corpus rows (with ``_row``, their position) to probe: up to ``max_states_probed``, with
    ``probe_pool_first`` every probe-pool state (``in_sft`` false: the SFT policy's failures there are its own, not
    a fit to its training data) before states SFT trained on, each part drawn at random with the seed
    (``seeding.pool_first``); else one draw over both."""
    rows = corpus.with_row_index("_row")
    budget = min(corpus.height, config.max_states_probed or corpus.height)
    pooled = ~pl.col("in_sft") if config.probe_pool_first else pl.lit(False)
    return pl.concat(
        pool_first(
            rows.filter(pooled),
            rows.filter(~pooled),
            budget,
            lambda part, n: sample_rows(part, n, config.seed),  # each part its own draw from the seed
        )
    )


def probe_corpus(corpus: pl.DataFrame, sft_model: Any, config: MiningParams) -> pl.DataFrame:
    """Probe up to ``max_states_probed`` corpus states (:func:`probed_rows`: the probe pool first); the other rows
    keep null probe columns. Adds ``source = "offline"`` and ``origin`` (null: routine or not probed)."""
    corpus = with_in_sft(corpus)
    chosen = probed_rows(corpus, config)
    n_probed = chosen.height
    started = time.perf_counter()
    with acting_policy(sft_model, config, "offline") as policy:
        probed = probe_states(policy, chosen.drop("_row"), config)
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
    offline = (
        pl.concat([probed, rest], how="diagonal_relaxed")
        .sort("_row")
        .drop("_row")
        .with_columns(pl.lit("offline").alias("source"))
    )
    return with_origins(offline, config.critical, config.competence_threshold)


def _with_mining_columns(probed: pl.DataFrame, in_sft: pl.Expr, config: MiningParams) -> pl.DataFrame:
    online = probed.with_columns(
        pl.lit(1, pl.Int32).alias("n_copies"), pl.lit("online").alias("source"), in_sft.alias("in_sft")
    )
    return with_origins(online, config.critical, config.competence_threshold)


def task_in_sft(references: pl.DataFrame) -> dict[str, bool]:
    """Task id -> whether SFT trained on its references (``in_sft``; :func:`rmsweb_kedro.measures.mining.with_in_sft`
    for a table without it). sft_data splits by task, so a task's states share it."""
    return dict(with_in_sft(references).group_by("task_id").agg(pl.col("in_sft").all()).iter_rows())


def draw_rollout_tasks(candidates: list[Task], in_sft: dict[str, bool], config: MiningParams) -> list[Task]:
    """Up to ``online.rollouts`` of ``candidates`` (``all``: every one) drawn with the seed: with
    ``online.probe_pool_first`` the tasks SFT did not train on first, then the others (``seeding.pool_first``, one
    generator for both); else one draw over all (the same draw when there is no probe pool)."""

    def pooled(task: Task) -> bool:
        return config.online.probe_pool_first and not in_sft[task.id]

    wanted = config.online.rollouts
    limit = len(candidates) if wanted == "all" else wanted
    pool = [t for t in candidates if pooled(t)]
    rest = [t for t in candidates if not pooled(t)]
    first, then = pool_first(pool, rest, limit, seeded_rng(config.seed).sample)  # one stream
    return first + then


def rollout_journal(sft_model: Any, config: MiningParams) -> Journal | None:
    """The journal of the online rollouts (``online.journal_path``), its entries found by task and valid for the
    policy's checkpoint and what decides a rollout's outcome (prompt, reply length, steps, world, judge); None
    without a path, or when the in-process checkpoint has no directory to tell it from another (a model built in
    memory)."""
    from rmsweb_kedro.models.serving import checkpoint_directory

    online = config.online
    if online.journal_path is None:
        return None
    checkpoint = checkpoint_directory(sft_model) if sft_model is not None else None
    if checkpoint is None and (config.policy.kind == "hf" or config.policy.server is not None):
        logger.info("online rollouts not journaled: the SFT checkpoint has no directory (built in memory)")
        return None
    decisive = {
        "checkpoint": str(checkpoint.resolve()) if checkpoint else None,
        "policy": config.policy.model_dump(mode="json"),
        "max_new_tokens": config.scoring.max_new_tokens,
        **online.model_dump(mode="json", include={"max_steps", "sandbox_seed", "judge"}),
    }
    return Journal(online.journal_path, fingerprint(decisive))


def _episodes(chosen: list[Task], config: MiningParams) -> list[Any]:
    """One greedy rollout a task (keyed by task id in the journal), its screenshots in a folder of its own under
    ``online.screenshot_root``."""
    from rmsweb_kedro.episodes.rollouts import EpisodeSpec

    shots = Path(config.online.screenshot_root).resolve()
    return [
        EpisodeSpec(
            key=task.id,
            task=task,
            max_steps=config.online.max_steps,
            trajectory_id=f"mining-online__{task.id}",
            screenshot_dir=str(shots / f"mining-online__{task.id}"),
            relative_to=str(shots),
        )
        for task in chosen
    ]


def probe_online(
    tasks: list[Task],
    references: pl.DataFrame,
    sft_model: Any,
    config: MiningParams,
    rollouts: dict[str, Any] | None = None,
) -> tuple[pl.DataFrame, dict[str, Any], pl.DataFrame]:
    """Greedy rollouts of the SFT policy on ``online.rollouts`` tasks of ``online.split`` that have a successful
    reference (``references``: STATE rows with ``in_sft``; probe-pool tasks first: :func:`draw_rollout_tasks`),
    in the real sandbox (served with ``online.sandbox_seed``, the world the tasks were made for) on the
    ``rollouts`` backend, each finished one journaled (:func:`rollout_journal`); the divergences of each failed
    rollout become STATE rows with the reference action, probed like offline states (screenshots kept under
    ``online.screenshot_root``), carrying their task's ``in_sft`` and the failure mode of the rollout's own action
    where the probe found none wrong. Returns the probed states, the rollouts' counts and their steps
    (:data:`~rmsweb_kedro.contracts.schema.EPISODE_STEP_SCHEMA`, screenshots relative to ``online.screenshot_root``)."""
    from rmsweb_kedro.episodes.rollouts import Roles, run_rollouts
    from rmsweb_kedro.judges.choice import judge_factory

    in_sft_of = task_in_sft(references)
    in_sft = pl.col("task_id").replace_strict(in_sft_of, default=None, return_dtype=pl.Boolean)
    empty = _with_mining_columns(pl.DataFrame(schema={**STATE_SCHEMA, **PROBE_SCHEMA}), in_sft, config)
    candidates = [t for t in tasks if t.split == config.online.split and t.id in in_sft_of]
    if config.online.rollouts == 0 or not candidates:
        logger.info(
            "online probing skipped: %s rollouts asked, %d tasks with references",
            config.online.rollouts,
            len(candidates),
        )
        return empty, {"rollouts": 0}, pl.DataFrame(schema=EPISODE_STEP_SCHEMA)
    chosen = draw_rollout_tasks(candidates, in_sft_of, config)
    shots = Path(config.online.screenshot_root).resolve()
    image_root = Path(PromptConfig.model_validate(config.policy.prompt).image_root or ".").resolve()
    # greedy rollouts and the K-sample probes of their divergences: one policy, one server
    with acting_policy(sft_model, config, "online", greedy=True) as policy:
        trajectories = [
            trajectory
            for (trajectory,) in run_rollouts(
                _episodes(chosen, config),
                Roles(agent=lambda _seed: policy, judge=judge_factory(config.online.judge)),
                rollouts,
                browsers=config.online.envs,
                browser={"headless": config.online.headless},
                sandbox_seed=config.online.sandbox_seed,
                journal=rollout_journal(sft_model, config),
                progress="policy rollouts",
            )
        ]
        prefix = f"{Path(os.path.relpath(shots, image_root)).as_posix()}/"
        first_only = config.online.divergences == "first"
        states, counts = divergence_states(
            trajectories, {t.id: t for t in chosen}, references, prefix, first_only
        )
        probed = probe_states(policy, states, config) if states.height else None
    if probed is not None:
        own = rollout_failure_modes(states, trajectories, config.scoring.repeat_window)
        probed = probed.with_columns(pl.col("failure_mode").fill_null(pl.Series(own, dtype=pl.String)))
    columns = ("trajectory_id", "task_id", "success", "termination", "n_steps")
    per_rollout = [{k: v for k, v in trajectory_row(r).items() if k in columns} for r in trajectories]
    logger.info("online probing: %s", counts)
    steps = pl.DataFrame(
        [row for trajectory in trajectories for row in episode_step_rows(trajectory, "sft")],
        schema=EPISODE_STEP_SCHEMA,
    )
    online = empty if probed is None else _with_mining_columns(probed, in_sft, config)
    return online, {**counts, "episodes": per_rollout}, steps
