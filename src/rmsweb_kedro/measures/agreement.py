"""How far to trust an LLM judge: its verdicts against ground truth (the sandbox checker's) on the same episodes.

Agreement statistics with intervals (accuracy, precision and recall on success, Cohen's kappa), a stratified sample
of episodes, and the failure mode of a failed episode. Used by the ``judge_agreement`` pipeline.

Intervals: Wilson score intervals for the proportions (sound at 0 or n and for small n); a seeded percentile
bootstrap over episodes for kappa, which has no simple closed form at small n.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import polars as pl

from rmsweb_kedro.contracts.schema import Trajectory
from rmsweb_kedro.contracts.seeding import sample_rows, seeded_rng
from rmsweb_kedro.measures.mining import classify_episode
from rmsweb_kedro.measures.reporting import wilson_interval


def failure_mode(trajectory: Trajectory) -> str:
    """``success`` for a successful episode, else its failure mode (:func:`rmsweb_kedro.measures.mining.classify_episode`:
    the sandbox checker knows what was wrong, not why)."""
    mode = classify_episode(trajectory.success, trajectory.termination)
    return "success" if mode is None else mode.value


def stratified_sample(
    frame: pl.DataFrame, strata: Sequence[str], per_stratum: int, seed: int
) -> pl.DataFrame:
    """At most ``per_stratum`` rows of every combination of ``strata`` (drawn with ``seed``), so rare outcomes are
    not drowned by common ones; rows keep the frame's columns, sorted by the strata."""
    if frame.is_empty():
        return frame
    parts = []
    for _, part in sorted(frame.group_by(list(strata)), key=lambda item: tuple(str(v) for v in item[0])):
        take = min(per_stratum, part.height)
        parts.append(sample_rows(part, take, seed) if take < part.height else part)
    return pl.concat(parts)


def cohen_kappa(truth: Sequence[bool], judged: Sequence[bool]) -> float | None:
    """Cohen's kappa of two binary raters; None when it is undefined (chance agreement 1: one class only)."""
    n = len(truth)
    if n == 0:
        return None
    # Exact fractions: a judge agreeing only by chance gets kappa 0, not a rounding residue.
    observed = Fraction(sum(t == j for t, j in zip(truth, judged, strict=True)), n)
    p_true, p_judged = Fraction(sum(truth), n), Fraction(sum(judged), n)
    expected = p_true * p_judged + (1 - p_true) * (1 - p_judged)
    return None if expected == 1 else float((observed - expected) / (1 - expected))


def _kappa_interval(
    truth: Sequence[bool], judged: Sequence[bool], confidence: float, n_boot: int, seed: int
) -> tuple[float | None, float | None]:
    # Python's generator, index by index, not seeding.bootstrap_indices (numpy's): the agreement tables' intervals
    # were drawn this way
    rng, n = seeded_rng(seed), len(truth)
    values = []
    for _ in range(n_boot):
        idx = [rng.randrange(n) for _ in range(n)]
        kappa = cohen_kappa([truth[i] for i in idx], [judged[i] for i in idx])
        if kappa is not None:
            values.append(kappa)
    if len(values) < n_boot / 2:  # most resamples hold one class only: no interval worth the name
        return None, None
    values.sort()
    tail = (1 - confidence) / 2
    return values[int(tail * (len(values) - 1))], values[int((1 - tail) * (len(values) - 1))]


def agreement(
    truth: Sequence[bool], judged: Sequence[bool], confidence: float = 0.95, n_boot: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Counts (tp, fp, fn, tn with "positive" = success), accuracy, precision and recall on success with Wilson
    intervals, and Cohen's kappa with a bootstrap interval. A statistic without data is None, never NaN."""
    pairs = list(zip(truth, judged, strict=True))
    tp = sum(t and j for t, j in pairs)
    fp = sum(j and not t for t, j in pairs)
    fn = sum(t and not j for t, j in pairs)
    tn = len(pairs) - tp - fp - fn
    row: dict[str, Any] = {"episodes": len(pairs), "tp": tp, "fp": fp, "fn": fn, "tn": tn}
    for name, hits, trials in (
        ("accuracy", tp + tn, len(pairs)),
        ("precision", tp, tp + fp),
        ("recall", tp, tp + fn),
    ):
        low, high = wilson_interval(hits, trials, confidence)
        row |= {name: hits / trials if trials else None, f"{name}_low": low, f"{name}_high": high}
    low, high = _kappa_interval(truth, judged, confidence, n_boot, seed) if pairs else (None, None)
    row |= {"kappa": cohen_kappa(truth, judged), "kappa_low": low, "kappa_high": high}
    return row


AGREEMENT_SCHEMA = pl.Schema(
    {"group": pl.String, "value": pl.String, "episodes": pl.Int64, "tp": pl.Int64, "fp": pl.Int64,
     "fn": pl.Int64, "tn": pl.Int64, "judge_errors": pl.Int64}
    | dict.fromkeys([f"{m}{s}" for m in ("accuracy", "precision", "recall", "kappa") for s in ("", "_low", "_high")],
                    pl.Float64)
)  # fmt: skip


def agreement_table(
    verdicts: pl.DataFrame, groups: Sequence[str], confidence: float, n_boot: int, seed: int
) -> pl.DataFrame:
    """One row for all episodes (``group`` = "all") and one per value of each column in ``groups``. ``verdicts``:
    boolean ``truth`` and ``judged`` columns, ``judge_error`` (null when the judge's reply was usable)."""
    rows = []
    slices = [("all", "all", verdicts)] + [
        (column, str(value), part)
        for column in groups
        for (value,), part in sorted(verdicts.group_by(column), key=lambda item: str(item[0][0]))
    ]
    for group, value, part in slices:
        stats = agreement(part["truth"].to_list(), part["judged"].to_list(), confidence, n_boot, seed)
        errors = int(part["judge_error"].is_not_null().sum())
        rows.append({"group": group, "value": value, **stats, "judge_errors": errors})
    return pl.DataFrame(rows, schema=AGREEMENT_SCHEMA)
