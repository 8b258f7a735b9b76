"""The evaluation's report, the library part: the comparison table, collection statistics, failure modes, the
states that flipped and the paper's claims beside what this run measured, as tables, markdown and HTML (the figures
are :mod:`rmsweb_kedro.measures.figures`'); tables and statistics are made with
:mod:`rmsweb_kedro.measures.reporting`. Used by the ``evaluate`` pipeline and, for its re-rendered report, ``ablations``. A
library module: typed configs (:class:`~rmsweb_kedro.measures.evaluation.EvaluateParams`), no catalog names, no ``params:``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from rmsweb_kedro.measures.evaluation import (
    Claim,
    EvaluateParams,
    distinct_episodes,
    paired_outcomes,
    paired_table,
    seed_of,
)
from rmsweb_kedro.measures.mining import EpisodeFailure, classify_episode
from rmsweb_kedro.measures.reporting import (
    BOOTSTRAP_INTERVAL,
    PAIRED_INTERVAL,
    SEEDS_INTERVAL,
    as_percent,
    discordance_sd,
    interval_mde,
    markdown_table,
    mcnemar_exact_p,
    minimum_detectable_effect,
    paired_bootstrap,
    paired_difference_interval,
    pooled_seed_bootstrap,
    pooled_seeds_mde,
    reflection_step_pairs,
    reflection_steps,
    steps_saved_pct,
    with_counts,
)

# ---------------------------------------------------------------- collection statistics


#: The columns of the collection table, from the collect pipeline's ``collection_stats`` (per mode).
COLLECTION_COLUMNS = {
    "tasks": pl.Int64,
    "attempts": pl.Int64,
    "env_errors": pl.Int64,
    "blocked": pl.Int64,
    "judge_errors": pl.Int64,
    "yield": pl.Float64,
    "attempts_per_success": pl.Float64,
    "mean_steps_success": pl.Float64,
    "tokens_per_verified": pl.Float64,
    "cost_usd_per_verified": pl.Float64,
}


def collection_table(collection_stats: dict[str, Any]) -> pl.DataFrame:
    """One row per collection mode of the collect pipeline's ``collection_stats``: yield (tasks with a verified
    success), attempts per success, mean steps of successful trajectories, tokens and cost per verified one."""
    rows = [
        {"mode": mode, **{k: summary.get(k) for k in COLLECTION_COLUMNS}}
        for mode, summary in (collection_stats or {}).get("modes", {}).items()
    ]
    return pl.DataFrame(rows, schema={"mode": pl.String, **COLLECTION_COLUMNS})


# ---------------------------------------------------------------- claims


@dataclass(frozen=True)
class Measure:
    """This run's figure for a claim: the value (None: not measured), how it was measured (or why not), its
    interval at the report's confidence (same unit as the value), over ``n`` pairs by the method ``interval``, and
    ``mde``, the smallest true value that design would have resolved at the report's power (same unit)."""

    value: float | None
    how: str
    low: float | None = None
    high: float | None = None
    n: int | None = None
    interval: str | None = None
    p_value: float | None = None
    mde: float | None = None


def paired_points(
    rows: pl.DataFrame, first: str, second: str, config: EvaluateParams, *, offline: bool = False
) -> Measure:
    """``first``'s success minus ``second``'s in points, paired (:func:`~rmsweb_kedro.measures.evaluation.paired_outcomes`):
    online episodes by task and run (environment errors left out), or with ``offline`` the held-out states' step
    success by state; with Newcombe's paired interval and McNemar's exact p-value (:mod:`rmsweb_kedro.measures.reporting`)
    and the MDE of the observed discordance (``reporting.discordance_sd``; with no discordant pair, which leaves no
    spread to estimate, the interval's: ``reporting.interval_mde``)."""
    if offline:
        counts = paired_outcomes(rows, first, second, on=("state_id",), outcome="step_success")
        what, row, items = "offline step success", "offline prediction", "held-out states scored for both"
        none = "no held-out state scored for both models"
    else:
        counts = paired_outcomes(rows, first, second)
        what, row = "online success", "online episode"
        items = (
            "(task, run) pairs judged for both (environment errors left out; greedy repeats of a task with the "
            "same outcomes count once)"
        )
        none = "no (task, run) judged for both models"
    both, only_first, only_second, neither = counts
    n = both + only_first + only_second + neither
    what = f"{first} − {second} {what}, in points"
    if n == 0:
        missing = [m for m in (first, second) if m not in set(rows["model"].to_list())]
        why = f"no {row} of {', '.join(missing)}" if missing else none
        return Measure(None, f"{what}: not measured ({why})", n=0)
    confidence, power = config.confidence, config.power
    low, high = paired_difference_interval(both, only_first, only_second, neither, confidence)
    mde = (
        minimum_detectable_effect(discordance_sd(only_first / n, only_second / n), n, confidence, power)
        if only_first + only_second
        else interval_mde(low, high, confidence, power)
    )
    p_value = mcnemar_exact_p(only_first, only_second)
    test = "no discordant pair" if p_value is None else f"McNemar exact p = {p_value:.3g}"
    how = (
        f"{what}, over the {n} {items}: "
        f"{only_first} won by {first} alone, {only_second} by {second} alone; {test}"
    )
    value = 100 * (only_first - only_second) / n
    return Measure(value, how, 100 * low, 100 * high, n, PAIRED_INTERVAL, p_value, 100 * mde)


def online_steps_saved(episodes: pl.DataFrame, first: str, second: str, config: EvaluateParams) -> Measure:
    """% fewer steps ``first`` takes than ``second`` on the (task, run) pairs both solved online (greedy repeats
    once: :func:`~rmsweb_kedro.measures.evaluation.distinct_episodes`), ``100 (1 −
    mean(first) / mean(second))`` (:func:`~rmsweb_kedro.measures.reporting.steps_saved_pct`), with a paired bootstrap
    interval over those pairs (``bootstrap_resamples`` resamples, seeded with ``seed``)."""
    greedy = ["greedy"] if "greedy" in episodes.columns else []
    won = episodes.filter(pl.col("success").fill_null(False)).select(
        "model", "task_id", "run", "n_steps", *greedy
    )
    pairs = won.filter(pl.col("model") == first).join(
        won.filter(pl.col("model") == second), on=["task_id", "run"], suffix="_b"
    )
    pairs = distinct_episodes(pairs, ("n_steps", "n_steps_b"))  # greedy repeats: one pair, not one a run
    what = f"steps on the sandbox tasks both {first} and {second} solved online, % fewer for {first}"
    if pairs.is_empty():
        return Measure(None, f"{what}: not measured (no task solved by both)", n=0)
    ours, theirs = pairs["n_steps"].to_list(), pairs["n_steps_b"].to_list()
    low, high = paired_bootstrap(
        ours, theirs, steps_saved_pct, config.bootstrap_resamples, config.seed, config.confidence
    )
    how = f"{what}, over the {pairs.height} (task, run) pairs both solved; " + (
        "no interval: under 2 pairs to resample"
        if low is None
        else f"{config.bootstrap_resamples} resamples of those pairs, seed {config.seed}"
    )
    return Measure(
        float(steps_saved_pct(ours, theirs)), how, low, high, pairs.height,
        None if low is None else BOOTSTRAP_INTERVAL, mde=interval_mde(low, high, config.confidence, config.power),
    )  # fmt: skip


def claim_pairs(labels: list[str], first: str, second: str) -> list[tuple[int | None, str, str]]:
    """``(seed, first's label, second's label)`` for each comparison a claim between ``first`` and ``second``
    makes: the two models themselves (seed None); where a name is a model of several training seeds (labels
    ``<name>_s<seed>``, ``evaluation.seed_label``), each seed's model against the other side, the same seed's when
    both have seeds. Empty when a side has no model in ``labels``."""

    def members(name: str) -> dict[int | None, str]:
        if name in labels:
            return {None: name}
        return {seed: label for label in labels if (seed := seed_of(label, name)) is not None}

    ours, theirs = members(first), members(second)
    if None in ours and None in theirs:
        return [(None, first, second)]
    if None in theirs:
        return [(seed, label, second) for seed, label in sorted(ours.items())]
    if None in ours:
        return [(seed, first, label) for seed, label in sorted(theirs.items())]
    return [(seed, ours[seed], theirs[seed]) for seed in sorted(set(ours) & set(theirs))]


def pooled_points(
    rows: pl.DataFrame,
    pairs: list[tuple[int | None, str, str]],
    first: str,
    second: str,
    config: EvaluateParams,
    *,
    offline: bool = False,
) -> Measure:
    """``first``'s success minus ``second``'s in points pooled over training seeds: the mean, over the items
    (held-out states offline; (task, run) episodes online) judged for every seed's pair (:func:`claim_pairs`), of
    each seed's paired difference, with the two-way bootstrap interval over items and seeds
    (:func:`~rmsweb_kedro.measures.reporting.pooled_seed_bootstrap`, ``bootstrap_resamples``, seeded with
    ``seed``), and its MDE (:func:`~rmsweb_kedro.measures.reporting.pooled_seeds_mde`)."""
    import numpy as np

    on, outcome = (("state_id",), "step_success") if offline else (("task_id", "run"), "success")
    seeds = [seed for seed, _, _ in pairs]
    columns = []
    for index, (_, a, b) in enumerate(pairs):
        table = paired_table(rows, a, b, on, outcome)
        difference = pl.col(outcome).cast(pl.Int8) - pl.col(f"{outcome}_b").cast(pl.Int8)
        columns.append(table.select(*on, difference.alias(f"d{index}")))
    joined = columns[0]
    for column in columns[1:]:
        joined = joined.join(column, on=list(on))
    what = f"{first} − {second} {'offline step success' if offline else 'online success'}, in points"
    grid = joined.select(f"d{i}" for i in range(len(pairs))).to_numpy()
    if not grid.size:
        return Measure(
            None, f"{what}, pooled over seeds {seeds}: not measured (no item judged for every seed)", n=0
        )
    low, high = pooled_seed_bootstrap(grid, config.bootstrap_resamples, config.seed, config.confidence)
    per_seed = ", ".join(f"seed {s} {100 * grid[:, i].mean():+.1f}" for i, s in enumerate(seeds))
    items = "held-out states" if offline else "(task, run) episodes"
    how = (
        f"{what}, pooled over training seeds {', '.join(map(str, seeds))}: the mean over the {grid.shape[0]} "
        f"{items} judged for every seed of the seeds' paired differences ({per_seed}); "
        f"{config.bootstrap_resamples} resamples of items and seeds, seed {config.seed}"
    )
    if low is not None:
        low, high = 100 * low, 100 * high
    mde = pooled_seeds_mde(grid, config.confidence, config.power)
    return Measure(
        float(100 * np.mean(grid)), how, low, high, int(grid.size), SEEDS_INTERVAL,
        mde=None if mde is None else 100 * mde,
    )  # fmt: skip


def paired_measures(
    claim: Claim, episodes: pl.DataFrame, predictions: pl.DataFrame, config: EvaluateParams
) -> list[tuple[str | None, Measure]]:
    """A :data:`~rmsweb_kedro.measures.evaluation.PAIRED_MEASURES` claim between its two ``models``, as
    ``(seeds, measure)`` rows: one for two single models (seeds None); where a side has several training seeds,
    one row a seed and, for the success claims, one pooled over them (``pooled 0, 1, 2``)."""
    first, second = claim.models
    offline = claim.key == "offline_step_points"
    rows = predictions if offline else episodes
    labels = list(dict.fromkeys(rows["model"].to_list())) if rows.height else []
    pairs = claim_pairs(labels, first, second) or [(None, first, second)]

    def one(a: str, b: str) -> Measure:
        if claim.key == "steps_on_solved_pct":
            return online_steps_saved(episodes, a, b, config)
        return paired_points(rows, a, b, config, offline=offline)

    measured = [(None if seed is None else str(seed), one(a, b)) for seed, a, b in pairs]
    if len(pairs) > 1 and claim.key != "steps_on_solved_pct":
        pooled = pooled_points(rows, pairs, first, second, config, offline=offline)
        measured.append((f"pooled {', '.join(str(seed) for seed, _, _ in pairs)}", pooled))
    return measured


def reflection_saving(collection_log: pl.DataFrame, config: EvaluateParams) -> Measure:
    """% of steps reflection_retries saves on the tasks both it and a baseline mode solved (the first baseline of
    :data:`~rmsweb_kedro.measures.reporting.STEP_BASELINES` with such a task), with a paired bootstrap interval over those
    tasks (``bootstrap_resamples`` resamples, seeded with ``seed``)."""
    row = next(
        (
            r
            for r in reflection_steps(collection_log).iter_rows(named=True)
            if r["steps_saved_pct"] is not None
        ),
        None,
    )
    if row is None:
        return Measure(
            None,
            "not measured in this run: needs reflection_retries and single/independent_retries collections "
            "(the ablations pipeline, or collect.modes with several modes)",
        )
    pairs = reflection_step_pairs(collection_log).filter(
        (pl.col("baseline") == row["baseline"]) & pl.col("solved") & pl.col("solved_b")
    )
    low, high = paired_bootstrap(
        pairs["steps"].to_list(), pairs["steps_b"].to_list(), steps_saved_pct,
        config.bootstrap_resamples, config.seed, config.confidence,
    )  # fmt: skip
    how = (
        f"steps of the successful collected trajectory, reflection_retries vs {row['baseline']}, % fewer, "
        f"over the {row['solved_both']} tasks both solved (of {row['tasks']}); "
        + (
            "no interval: under 2 tasks to resample"
            if low is None
            else f"{config.bootstrap_resamples} resamples of those tasks, seed {config.seed}"
        )
    )
    return Measure(
        row["steps_saved_pct"], how, low, high, row["solved_both"], None if low is None else BOOTSTRAP_INTERVAL,
        mde=interval_mde(low, high, config.confidence, config.power),
    )  # fmt: skip


def measures(
    episodes: pl.DataFrame, collection_log: pl.DataFrame, config: EvaluateParams
) -> dict[str, Measure]:
    """How this run measures each claim key that names no ``models`` (those are :func:`paired_measures`')."""
    return {"reflection_steps_saved_pct": reflection_saving(collection_log, config)}


#: The claims table's columns: the paper's claim, this run's figure with its interval (``low``-``high`` over ``n``
#: pairs or tasks by the method ``interval``; ``resolved``: the interval excludes 0; ``mde``: the smallest true
#: value the design would have resolved at ``evaluate.power``) and how it was measured.
CLAIMS_SCHEMA = pl.Schema(
    {"claim": pl.String, "seeds": pl.String, "paper": pl.String, "this_run": pl.Float64, "low": pl.Float64,
     "high": pl.Float64, "resolved": pl.Boolean, "mde": pl.Float64,
     "n": pl.Int64, "interval": pl.String, "p_value": pl.Float64, "same_direction": pl.Boolean,
     "within_paper_range": pl.Boolean, "measured_as": pl.String}
)  # fmt: skip


def claims_table(
    episodes: pl.DataFrame, predictions: pl.DataFrame, collection_log: pl.DataFrame, config: EvaluateParams
) -> pl.DataFrame:
    """The paper's claims (``config.claims``) beside this run's figure (:func:`measures`, or
    :func:`paired_measures` for a claim naming two ``models``: a row a training seed and one pooled over them where
    a model has several, ``seeds`` naming them), its interval and whether the direction agrees: every claim is
    stated as a gain (points gained, % of steps saved), so agreeing means a positive figure; ``resolved`` says
    whether the interval excludes 0 (None when there is no interval) and ``mde`` what the design could have
    resolved (``evaluate.power``)."""
    measured = measures(episodes, collection_log, config)
    rows = []
    for claim in config.claims:
        found = (
            paired_measures(claim, episodes, predictions, config)
            if claim.models
            else [(None, measured.get(claim.key, Measure(None, f"unknown measure {claim.key!r}")))]
        )
        rows += [claim_row(claim, seeds, m) for seeds, m in found]
    return pl.DataFrame(rows, schema=CLAIMS_SCHEMA)


def claim_row(claim: Claim, seeds: str | None, m: Measure) -> dict[str, Any]:
    """One row of the claims table (:data:`CLAIMS_SCHEMA`): the claim, the seeds its figure is over, the figure."""
    in_range = (
        None
        if m.value is None or claim.paper_low is None or claim.paper_high is None
        else claim.paper_low <= m.value <= claim.paper_high
    )
    return {"claim": claim.claim, "seeds": seeds, "paper": claim.paper, "this_run": m.value, "low": m.low,
            "high": m.high, "mde": m.mde, "n": m.n, "interval": m.interval, "p_value": m.p_value,
            "resolved": None if m.low is None or m.high is None else m.low > 0 or m.high < 0,
            "same_direction": None if m.value is None else m.value > 0, "within_paper_range": in_range,
            "measured_as": m.how}  # fmt: skip


#: The report's words for mining's episode taxonomy (a wrong answer and a wrong final state are both a wrong outcome).
EPISODE_FAILURE_WORDS = {
    EpisodeFailure.ENVIRONMENT_ERROR: "environment error",
    EpisodeFailure.STEP_LIMIT: "ran out of steps",
    EpisodeFailure.MODEL_ERROR: "unparseable output",
    EpisodeFailure.WRONG_ANSWER: "wrong outcome",
    EpisodeFailure.WRONG_STATE: "wrong outcome",
    EpisodeFailure.OTHER: "wrong outcome",
}


#: The report's words for where a wrong typed or chosen string came from (``evaluation.argument_origin``).
ARGUMENT_ORIGIN_WORDS = {
    "expected": "the right string, another field wrong",
    "in_task_or_page": "copied from the wrong place",
    "first_word_only": "first word copied, the rest not",
    "elsewhere": "not in the task or page",
}


def failure_modes(predictions: pl.DataFrame, episodes: pl.DataFrame) -> pl.DataFrame:
    """Counts per model of why a step was wrong offline, where a failed episode first left its task's reference
    solution (``online first wrong step``: ``evaluation.reference_divergence``; a wrong string argument split by
    where it came from) and why an episode failed online: mining's taxonomy (``mining.FailureMode``, which scoring
    labels every reply with; ``mining.EpisodeFailure`` for episodes), in words."""
    offline = predictions.filter(~pl.col("step_success")).select(
        "model",
        pl.lit("offline step").alias("where"),
        pl.col("failure_mode").fill_null("other").str.replace_all("_", " ").alias("mode"),
    )
    failed = episodes.filter(~pl.col("success").fill_null(False))
    words = [
        EPISODE_FAILURE_WORDS[classify_episode(success, termination)]
        for success, termination in failed.select("success", "termination").iter_rows()
    ]
    online = failed.select(
        "model", pl.lit("online episode").alias("where"), pl.Series("mode", words, dtype=pl.String)
    )
    origin = pl.col("divergence_argument").replace_strict(ARGUMENT_ORIGIN_WORDS, default=None)
    first_wrong = failed.filter(pl.col("divergence_mode").is_not_null()).select(
        "model",
        pl.lit("online first wrong step").alias("where"),
        pl.concat_str(
            pl.col("divergence_mode").str.replace_all("_", " "),
            pl.when(origin.is_not_null()).then(pl.format(" ({})", origin)).otherwise(pl.lit("")),
        ).alias("mode"),
    )
    return (
        pl.concat([offline, first_wrong, online])
        .group_by("model", "where", "mode", maintain_order=True)
        .len("count")
    )


def flips(predictions: pl.DataFrame, first: str, second: str) -> pl.DataFrame:
    """The held-out states whose offline step success differs between ``first`` (or each of its training seeds'
    models, ``claim_pairs``) and ``second``: one row per (``model``, ``state_id``) with ``won_by`` (``first`` or
    ``second``'s name) and the state's ``step_kind``."""
    labels = list(dict.fromkeys(predictions["model"].to_list())) if predictions.height else []
    rows = []
    for _, a, b in claim_pairs(labels, first, second):
        ours = predictions.filter(pl.col("model") == a).select(
            "state_id", pl.col("step_kind").fill_null("unknown"), "step_success"
        )
        theirs = predictions.filter(pl.col("model") == b).select(
            "state_id", pl.col("step_success").alias("b")
        )
        pairs = ours.join(theirs, on="state_id").filter(pl.col("step_success") != pl.col("b"))
        rows.append(
            pairs.select(
                pl.lit(a).alias("model"), "state_id", "step_kind",
                pl.when(pl.col("step_success")).then(pl.lit(first)).otherwise(pl.lit(second)).alias("won_by"),
            )
        )  # fmt: skip
    schema = {"model": pl.String, "state_id": pl.String, "step_kind": pl.String, "won_by": pl.String}
    return pl.concat(rows) if rows else pl.DataFrame(schema=schema)


def salvage_ds_table(report: dict[str, Any] | None) -> pl.DataFrame:
    """One row per Salvage-DS training seed (``salvage_ds_report``): the updates it took and why it stopped
    (``max_steps``, or e.g. its sampling budget spent), the update whose weights it returned (0: the SFT policy) and
    the dev step success there against step 0's, the trained states left in the pool, per sampled batch the mean
    generation rounds and accepted, anchored and discarded groups, and the groups it trained by their state's
    mining ``origin``."""
    schema = {"seed": pl.Int64, "updates": pl.Int64, "stop": pl.String, "returned": pl.String,
              "dev_sft": pl.Float64, "dev_returned": pl.Float64, "rounds": pl.Float64, "accepted": pl.Float64,
              "anchored": pl.Float64, "discarded": pl.Float64, "saturated": pl.Float64,
              "trained_by_origin": pl.String}  # fmt: skip
    if not report or "runs" not in report:
        return pl.DataFrame(schema=schema)
    dev_sft = report["before"].get("dev", {}).get("step_success_rate")
    rows = [
        {"seed": int(seed), "updates": run.get("steps"), "stop": run.get("stop_reason") or "max_steps",
         "returned": run["returned"], "dev_sft": dev_sft, "dev_returned": run["best_dev"],
         "rounds": run["means"].get("rounds"), "accepted": run["means"].get("accepted_groups"),
         "anchored": run["means"].get("anchored_groups"), "discarded": run["means"].get("discarded_groups"),
         "saturated": run["means"].get("saturated_states"),
         "trained_by_origin": ", ".join(f"{k} {v}" for k, v in run.get("trained_groups_by_origin", {}).items())}
        for seed, run in report["runs"].items()
    ]  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


# ---------------------------------------------------------------- the report


def verdict(row: dict[str, Any], power: float) -> str:
    """A claims-table row's paired difference in words: the figure, its interval, what the design could have
    detected (``mde`` at ``power``, over its n and seeds) and whether the interval resolves it; one not resolved
    says so with both: a true difference under the MDE had less than ``power`` chance of being resolved."""
    seeds, over, which = row["seeds"], f"n={row['n']} pairs", ""
    if seeds is not None and seeds.startswith("pooled"):
        pooled = seeds.removeprefix("pooled ")
        count = len(pooled.split(", "))
        over, which = f"n={row['n']}: {row['n'] // count} items x {count} seeds", f" (seeds {pooled} pooled)"
    elif seeds is not None:
        which = f" (seed {seeds})"
    head = f"{row['claim']}{which}: {row['this_run']:+.1f} points"
    interval = f"{row['low']:+.1f} to {row['high']:+.1f}, {row['interval']}"
    detectable = f"{row['mde']:.1f} points at {power:.0%} power ({over})"
    if row["resolved"]:
        return f"{head} ({interval}; could have detected >= {detectable}), resolved"
    return (
        f"{head}, not resolved: the interval ({interval}) holds 0, and this design could have detected only "
        f">= {detectable}"
    )


def online_caveat(comparison: pl.DataFrame, claims: pl.DataFrame, confidence: float, power: float) -> str:
    """One honest sentence on what the online episodes can tell apart at this n, and one per paired difference of
    the claims table (:func:`verdict`: its interval, its MDE at ``power`` and whether it is resolved)."""
    judged = comparison.filter(pl.col("success_rate").is_not_null()) if comparison.height else comparison
    if judged.height == 0:
        return "No online episode was judged in this run."
    n = judged["episodes"] - judged["env_errors"].fill_null(0)
    if judged["success_rate"].max() == 0:
        top = judged["success_high"].max()
        return (
            f"No model solved any online episode ({int(n.min())}–{int(n.max())} judged episodes each): at this n a "
            f"true success rate up to {100 * top:.0f} % is consistent with 0 successes ({confidence:.0%} Wilson), "
            "so the online figures cannot separate the models; the offline step metrics can."
        )
    widest = float((judged["success_high"] - judged["success_low"]).max())
    sentence = (
        f"Online figures rest on {int(n.min())}–{int(n.max())} judged episodes per model; their Wilson intervals "
        f"are up to {100 * widest:.0f} points wide."
    )
    paired = [
        verdict(r, power)
        for r in claims.filter(
            pl.col("interval").is_in([PAIRED_INTERVAL, SEEDS_INTERVAL]) & pl.col("mde").is_not_null()
        ).iter_rows(named=True)
    ]
    if not paired:
        return sentence + " Differences inside them are not resolved at this n."
    return f"{sentence} Paired over the same episodes ({confidence:.0%}): " + "; ".join(paired) + "."


#: The comparison's columns the report shows in %.
REPORT_RATE_COLUMNS = ["action_type_accuracy", "element_accuracy", "argument_match", "step_success_rate",
                       "invalid_format_rate", "success_rate", "success_low", "success_high", "run_std"]  # fmt: skip
#: The comparison's columns of the offline table, then of the online table (those present).
OFFLINE_COLUMNS = ["model", "n_states", "action_type_accuracy", "element_accuracy", "argument_match",
                   "step_success_rate", "invalid_format_rate"]  # fmt: skip
ONLINE_COLUMNS = ["model", "episodes", "env_errors", "blocked", "judge_errors", "distinct_episodes", "successes",
                  "success_rate", "success_low", "success_high", "run_std", "steps_on_solved", "tokens_per_task",
                  "cost_per_task_usd", "wall_s_per_task"]  # fmt: skip


def build_report(
    comparison: pl.DataFrame,
    breakdown: pl.DataFrame,
    kinds: pl.DataFrame,
    claims: pl.DataFrame,
    collection: pl.DataFrame,
    steps: pl.DataFrame,
    modes: pl.DataFrame,
    config: EvaluateParams,
    manifest: dict[str, Any] | None = None,
    ablations: str | None = None,
    salvage: dict[str, Any] | None = None,
) -> str:
    """``report.md``: the run manifest (``provenance.manifest_markdown``: commit, packages, seeds, checkpoints,
    judges, hardware, MLflow run), what was compared and how, the tables (Salvage-DS's runs from ``salvage``, its
    report), the figures (files beside the report); with ``ablations`` (the ablations pipeline's markdown section),
    that section too."""
    from rmsweb_kedro.runs.provenance import manifest_markdown

    table = as_percent(with_counts(comparison), REPORT_RATE_COLUMNS)
    figures = "\n".join(f"![{name}]({path})" for name, path in config.figures.items())
    sections = [
        "# RMSWeb evaluation report",
        manifest_markdown(manifest),
        *_protocol_section(config),
        *_evaluation_sections(table, comparison, breakdown, kinds, claims, config),
        *_claims_section(claims, config),
        *_salvage_section(salvage),
        *_collection_sections(collection, steps, modes),
        "## Figures",
        figures or "_(no figures configured)_",
    ]
    if ablations:
        sections.append(ablations.strip())
    return "\n\n".join(sections) + "\n"


def _protocol_section(config: EvaluateParams) -> list[str]:
    """How to read the rates, and the online protocol and cost model."""
    online = config.online
    seen, held = ("all" if n is None else f"up to {n}" for n in (online.max_tasks, online.max_held_out_tasks))
    return [
        "Rates in %. Online success is over judged episodes (environment failures are counted apart, never as the "
        f"agent's failure); `successes` gives k/n over the {online.runs} run(s); the interval is Wilson's at "
        f"{config.confidence:.0%} over the `distinct_episodes` (greedy repeats of a task with the same outcome "
        "are one episode); `run_std` is the spread of the per-run rates.",
        f"Online protocol: sandbox splits {online.splits}, {seen} tasks on the training sites and {held} on the "
        f"held-out sites {online.held_out_sites}, max {online.max_steps} steps, "
        f"{'greedy' if online.greedy else f'sampled (T={online.temperature})'} decoding, judge: the sandbox "
        f"checker. Cost model: {config.cost.prompt_usd_per_million} / {config.cost.completion_usd_per_million} USD "
        "per million prompt / completion tokens.",
    ]


def _evaluation_sections(
    table: pl.DataFrame,
    comparison: pl.DataFrame,
    breakdown: pl.DataFrame,
    kinds: pl.DataFrame,
    claims: pl.DataFrame,
    config: EvaluateParams,
) -> list[str]:
    """The offline step metrics (by kind of state too) and the online success (by site group too); ``table``: the
    comparison with counts, its rates in %."""
    return [
        "## Offline step metrics (held-out states)",
        markdown_table(table.select([c for c in OFFLINE_COLUMNS if c in table.columns])),
        "### Step success by kind of state",
        "What each held-out state asks for (`evaluation.step_kind`: the reference action's type and its element's "
        "role; `link the task names`: an item to pick out of a list by the name the task gives), with Wilson's "
        f"{config.confidence:.0%} interval.",
        markdown_table(as_percent(kinds, ["step_success_rate", "success_low", "success_high"])),
        "## Online success in the sandbox",
        markdown_table(table.select([c for c in ONLINE_COLUMNS if c in table.columns])),
        online_caveat(comparison, claims, config.confidence, config.power),
        "### By site group, sandbox split, site and level",
        markdown_table(as_percent(breakdown, ["success_rate", "success_low", "success_high"])),
    ]


def _claims_section(claims: pl.DataFrame, config: EvaluateParams) -> list[str]:
    """The paper's claims against this run, each with its interval and how it was computed."""
    return [
        "## The paper's claims and this run",
        f"Each figure with its {config.confidence:.0%} interval (`low`–`high`, same unit, over `n` pairs or tasks, "
        "by the method `interval`); `resolved`: the interval excludes 0; `mde`: the minimum detectable effect, the "
        "smallest true value this design (its `n`, its seeds, the spread of its pairs) would have resolved with "
        f'{config.power:.0%} power, a true value below it less often (docs/evaluate.md, "Power"). Online '
        "differences pair the two models' "
        "episodes of the same task and run (environment errors left out; greedy repeats with the same outcomes "
        "count once), offline ones their replies at the same "
        "held-out state, and take Newcombe's paired score interval with McNemar's exact `p_value`; steps saved "
        "take a paired bootstrap over the tasks both modes solved "
        f"({config.bootstrap_resamples} resamples, seed {config.seed}).",
        markdown_table(claims),
        "A toy-scale default run (tiny model, minutes of CPU) shows whether each stage works and points the right "
        "way, not the paper's sizes; the production configuration (`--env production`) is where sizes are measured.",
    ]


def _salvage_section(salvage: dict[str, Any] | None) -> list[str]:
    """What each Salvage-DS training seed did (``salvage``: its report)."""
    return [
        "## Salvage-DS: what each training seed did",
        "Each seed's run starts from the same SFT checkpoint; the dev split (`sft_states_dev`, which nothing else "
        "trains or evaluates on) is scored before training and every `loop.eval_every` updates, and the run returns "
        "the best of those weights (`returned`; `sft`: step 0 won, the SFT policy itself). Dev step success in %; "
        "`updates`/`stop`: the updates taken and why the run ended (a spent `sampled_action_budget` or an empty pool "
        "ends it early); the next columns are means per sampled batch (`saturated`: states that left the pool, all "
        "right in a row); `trained_by_origin`: the groups trained (accepted or anchored) by their state's mining "
        "origin (docs/mining.md). "
        "Figures: `salvage_ds/training.png` (dev curve, groups per batch, the pool, loss terms), "
        "`salvage_ds/states.png` (each trained state's share right over the updates), `evaluate/flips.png` (the "
        "held-out states that flipped).",
        markdown_table(as_percent(salvage_ds_table(salvage), ["dev_sft", "dev_returned"])),
    ]


def _collection_sections(collection: pl.DataFrame, steps: pl.DataFrame, modes: pl.DataFrame) -> list[str]:
    """The collection statistics, the steps reflection retries save, and the failure modes."""
    return [
        "## Collection statistics",
        markdown_table(as_percent(collection, ["yield"])),
        "### Steps on solved tasks: reflection_retries vs the other modes (paired, same tasks, same budget)",
        markdown_table(steps),
        "## Failure modes",
        markdown_table(modes),
    ]


def report_html(report: str) -> str:
    """``report.html``: the markdown report rendered (markdown-it); figures are the same files beside it."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(report)
    style = (
        "body{font-family:sans-serif;max-width:70em;margin:auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}"
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>RMSWeb evaluation report</title>"
        f"<style>{style}</style></head><body>{body}</body></html>\n"
    )
