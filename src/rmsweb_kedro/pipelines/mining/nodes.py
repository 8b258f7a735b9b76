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
    IN_SFT,
    FailureMode,
    concentration,
    corpus_states,
    deduplicate_states,
    failure_mode_table,
    in_sft_report,
    is_critical,
    origin_report,
    select_states,
    unseen_states,
    with_in_sft,
    with_origins,
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


def _with_origins(probes: pl.DataFrame, config: MiningParams) -> pl.DataFrame:
    """The probes with ``in_sft`` and ``origin`` as ``config`` defines it (an ablation's ``mining.critical`` reads
    the default run's probes)."""
    return with_origins(with_in_sft(probes), config.critical, config.competence_threshold)


def select_critical_states(
    offline: pl.DataFrame, online: pl.DataFrame, params: dict[str, Any]
) -> pl.DataFrame:
    """``critical_states``: with ``rl_corpus: mined`` the critical states (offline and online; ``origin`` says
    why, ``mining.critical`` which origins count) plus routine ballast, capped; with ``rl_corpus: full`` every
    offline corpus state (probed or not: training states and the probe pool; ``origin`` set where critical). States
    whose failure was the environment's are never selected."""
    config = MiningParams.model_validate(params)
    offline, online = _with_origins(offline, config), _with_origins(online, config)
    if config.rl_corpus == "full":
        chosen = offline.with_columns(pl.lit("full").alias("selection"))
    else:
        chosen = select_states(
            pl.concat([offline, _unseen_online(offline, online)], how="diagonal_relaxed"),
            critical=config.critical,
            competence_threshold=config.competence_threshold,
            ballast_share=config.ballast_share,
            cap=config.cap,
            seed=config.seed,
        )
    return chosen.select(CRITICAL_STATE_SCHEMA.names()).cast(dict(CRITICAL_STATE_SCHEMA))


def _unseen_online(offline: pl.DataFrame, online: pl.DataFrame) -> pl.DataFrame:
    """The online states identical to no probed corpus state: one that is, is that state, counted once as offline."""
    return unseen_states(online, offline.filter(pl.col("competence").is_not_null()))


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
    return failure_mode_table(_with_origins(probed, config), env_failed)


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
    states in the corpus against the mined set), counts by selection and source, why the critical states are
    critical (``by_origin``: per origin, the probed states of it and those in the RL corpus, each also by
    ``in_sft``), where they came from (``by_in_sft``: states SFT trained on, or held out of it), the online
    rollouts, params."""
    config = MiningParams.model_validate(params)
    offline, online = _with_origins(offline, config), _with_origins(online, config)
    probed_online = online.filter(pl.col("competence").is_not_null())
    by_in_sft = in_sft_report(offline, online, critical_states)
    by_origin = origin_report(pl.concat([offline, _unseen_online(offline, online)], how="diagonal_relaxed"),
                              critical_states)  # fmt: skip
    logger.info(
        "critical states (offline + online): %d of %d probed states SFT trained on, %d of %d held out of SFT; "
        "by origin (critical, in the RL corpus): %s",
        *(
            sum(by_in_sft[group][source][count] for source in ("offline", "online"))
            for group in IN_SFT
            for count in ("critical", "probed")
        ),
        {origin: (counts["states"], counts["selected"]) for origin, counts in by_origin.items()},
    )
    return {
        "params": config.model_dump(),
        "corpus_states": int(offline.height),
        "corpus_states_before_dedup": int(offline["n_copies"].sum()) if offline.height else 0,
        "corpus_states_held_out_of_sft": int((~offline["in_sft"]).sum()),
        "offline_probed": int(offline["competence"].is_not_null().sum()),
        "online_states": int(probed_online.height),
        "critical_in_corpus": offline.filter(is_critical()).height,
        "mined_states": critical_states.height,
        "concentration": concentration(offline, critical_states),
        "selected": {
            f"{selection}/{source}": int(n)
            for selection, source, n in critical_states.group_by("selection", "source")
            .len()
            .sort("selection", "source")
            .iter_rows()
        },
        "by_origin": by_origin,
        "by_in_sft": by_in_sft,
        "online_rollouts": online_stats,
    }
