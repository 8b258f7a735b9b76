"""Nodes of the ``mining`` pipeline: probe the SFT policy offline (K samples on corpus states) and online (rollouts
in the sandbox), keep the critical states, summarise failure modes. Probing is :mod:`rmsweb_kedro.measures.probing`, the
rules :mod:`rmsweb_kedro.measures.mining`.
"""

from __future__ import annotations

import logging
from typing import Any

import polars as pl

from rmsweb_kedro.contracts.schema import ENV_TERMINATIONS, tasks_from_frame
from rmsweb_kedro.measures import probing
from rmsweb_kedro.measures.mining import (
    CRITICAL_STATE_SCHEMA,
    ORIGINS,
    FailureMode,
    concentration,
    corpus_states,
    deduplicate_states,
    failure_mode_table,
    is_critical,
    origin_report,
    select_states,
    unseen_states,
    with_origin,
)
from rmsweb_kedro.measures.probing import MiningParams
from rmsweb_kedro.measures.reporting import figure_panels

logger = logging.getLogger(__name__)


def prepare_corpus(
    sft_states_train: pl.DataFrame, sft_states_probe: pl.DataFrame, params: dict[str, Any]
) -> pl.DataFrame:
    """The offline corpus: the STATE rows SFT trained on and the probe pool held out of it, ``in_sft`` saying which
    (:func:`rmsweb_kedro.measures.mining.corpus_states`), de-duplicated when ``mining.dedup`` (``n_copies`` counts folded
    copies)."""
    config = MiningParams.model_validate(params)
    states = corpus_states(sft_states_train, sft_states_probe)
    corpus = (
        deduplicate_states(states)
        if config.dedup
        else states.with_columns(pl.lit(1, pl.Int32).alias("n_copies"))
    )
    logger.info(
        "mining corpus: %d states (%d before de-duplication; %d of them held out of SFT)",
        corpus.height,
        states.height,
        sft_states_probe.height,
    )
    return corpus


def probe_offline(corpus: pl.DataFrame, sft_model: Any, params: dict[str, Any]) -> pl.DataFrame:
    """Probe up to ``max_states_probed`` corpus states (drawn at random with the seed) with the SFT policy; the
    other rows keep null probe columns (:func:`rmsweb_kedro.measures.probing.probe_corpus`)."""
    config = MiningParams.model_validate(params)
    return probing.probe_corpus(corpus, sft_model, config)


def probe_online(
    tasks: pl.DataFrame,
    sft_states_train: pl.DataFrame,
    sft_states_probe: pl.DataFrame,
    sft_model: Any,
    params: dict[str, Any],
    rollouts: dict[str, Any] | None = None,
) -> tuple[pl.DataFrame, dict[str, Any], pl.DataFrame]:
    """Greedy rollouts of the SFT policy in the sandbox on tasks with a successful reference (the training states
    and the probe pool, not de-duplicated: every task keeps all its reference states); the first divergence of
    each failed rollout is a probed STATE row (:func:`rmsweb_kedro.measures.probing.probe_online`). Returns the probed
    states, the rollouts' counts and their steps (``mining_online_steps``, for the viewer)."""
    config = MiningParams.model_validate(params)
    references = corpus_states(sft_states_train, sft_states_probe)
    return probing.probe_online(tasks_from_frame(tasks), references, sft_model, config, rollouts)


def select_critical_states(
    offline: pl.DataFrame, online: pl.DataFrame, params: dict[str, Any]
) -> pl.DataFrame:
    """``critical_states``: with ``rl_corpus: mined`` the critical states (offline and online) plus routine
    ballast, capped; with ``rl_corpus: full`` every offline corpus state (probed or not: training states and the
    probe pool). States whose failure was the environment's are never selected."""
    config = MiningParams.model_validate(params)
    offline, online = with_origin(offline), with_origin(online)
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
    states, their share of the source's critical states and mean competence (:func:`mining.failure_mode_table`);
    the online ``environment_error`` row counts the rollouts the environment failed (crashed, blocked by the site,
    or not judged: ``schema.ENV_TERMINATIONS``)."""
    config = MiningParams.model_validate(params)
    probed = pl.concat([offline, online], how="diagonal_relaxed")
    env_failed = sum(online_rollouts.get(end, 0) for end in ENV_TERMINATIONS)
    return failure_mode_table(probed, env_failed, config.competence_threshold)


def plot_failure_modes(failure_modes: pl.DataFrame):
    """A grouped bar plot of critical states per failure mode, offline and online side by side, each bar split by
    origin: states SFT trained on (solid) and states held out of it (hatched, the probe pool)."""
    modes = [mode.value for mode in FailureMode]
    figure, (axis,) = figure_panels(panel_size=(9, 4))
    width = 0.4
    for offset, source in ((-width / 2, "offline"), (width / 2, "online")):
        rows = {
            r["failure_mode"]: r
            for r in failure_modes.filter(pl.col("source") == source).iter_rows(named=True)
        }
        empty = {"n_states": 0, "n_in_sft": 0, "n_not_in_sft": 0}
        counts = [rows.get(m, empty) for m in modes]
        trained = [r["n_in_sft"] or 0 for r in counts]
        held_out = [r["n_not_in_sft"] or 0 for r in counts]
        # the environment's row counts rollouts, not states: it has no origin
        rollouts = [r["n_states"] - a - b for r, a, b in zip(counts, trained, held_out, strict=True)]
        x = [i + offset for i in range(len(modes))]
        bars = axis.bar(x, trained, width, label=f"{source}, trained on by SFT")
        colour = bars.patches[0].get_facecolor()
        axis.bar(x, held_out, width, bottom=trained, color=colour, hatch="//", edgecolor="white",
                 label=f"{source}, held out of SFT")  # fmt: skip
        if any(rollouts):
            axis.bar(x, rollouts, width, color="grey", label=f"{source}, rollouts the environment failed")
    axis.set_xticks(range(len(modes)), [m.replace("_", " ") for m in modes], rotation=30, ha="right")
    axis.set_ylabel("critical states")
    totals = failure_modes.select(pl.col("n_in_sft").sum(), pl.col("n_not_in_sft").sum()).row(0)
    axis.set_title(
        "Failure modes of the SFT policy on critical states "
        f"({totals[0]} on states SFT trained on, {totals[1]} held out of it)"
    )
    axis.legend(fontsize="small")
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
    states in the corpus against the mined set), counts by selection and source, where the critical states came
    from (``by_origin``: states SFT trained on, ``in_sft``, or held out of it, ``not_in_sft``), the online
    rollouts, params."""
    config = MiningParams.model_validate(params)
    offline = with_origin(offline)
    probed_online = online.filter(pl.col("competence").is_not_null())
    by_origin = origin_report(offline, online, critical_states, config.competence_threshold)
    logger.info(
        "critical states (offline + online): %d of %d probed states SFT trained on, %d of %d held out of SFT",
        *(
            sum(by_origin[origin][source][count] for source in ("offline", "online"))
            for origin in ORIGINS
            for count in ("critical", "probed")
        ),
    )
    return {
        "params": config.model_dump(),
        "corpus_states": int(offline.height),
        "corpus_states_before_dedup": int(offline["n_copies"].sum()) if offline.height else 0,
        "corpus_states_held_out_of_sft": int((~offline["in_sft"]).sum()),
        "offline_probed": int(offline["competence"].is_not_null().sum()),
        "online_states": int(probed_online.height),
        "critical_in_corpus": offline.filter(is_critical(config.competence_threshold)).height,
        "concentration": concentration(offline, critical_states, config.competence_threshold),
        "selected": {
            f"{selection}/{source}": int(n)
            for selection, source, n in critical_states.group_by("selection", "source")
            .len()
            .sort("selection", "source")
            .iter_rows()
        },
        "by_origin": by_origin,
        "online_rollouts": online_stats,
    }
