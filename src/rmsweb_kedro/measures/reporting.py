"""What every report and plot of the project is made with: figures, markdown tables, rates as %, the Wilson interval,
the intervals of paired differences (Newcombe's paired score interval, McNemar's exact test, the paired bootstrap),
what a design could have detected (the minimum detectable effect at a power), and the tables two pipelines both report (per-model tables gathered, reflection steps saved).

A library module: no catalog names, no ``params:``. Figures are made without pyplot (no global state, nothing left
open, no backend to choose); catalog datasets save them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist
from typing import Any

import polars as pl

from rmsweb_kedro.contracts.seeding import bootstrap_indices

# ---------------------------------------------------------------- figures


def figure_panels(ncols: int = 1, panel_size: tuple[float, float] = (6.0, 4.0)):
    """``(figure, [axes, ...])``: a figure of ``ncols`` side-by-side panels of ``panel_size`` inches each."""
    from matplotlib.figure import Figure

    width, height = panel_size
    fig = Figure(figsize=(width * ncols, height))
    return fig, list(fig.subplots(1, ncols, squeeze=False)[0])


# ---------------------------------------------------------------- tables


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pl.DataFrame) -> str:
    """``frame`` as a markdown table: floats to 3 significant digits, None as –, booleans as yes/no."""
    if frame.height == 0:
        return "_(empty)_"
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * frame.width]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join(lines)


def as_percent(frame: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """Rates as % (an all-null column read back from CSV is text: cast first)."""
    present = [c for c in columns if c in frame.columns]
    return frame.with_columns((pl.col(c).cast(pl.Float64) * 100).round(1) for c in present)


def with_counts(frame: pl.DataFrame) -> pl.DataFrame:
    """A ``successes`` column ``k/n`` (successes over judged episodes) beside the rates, so every online rate
    states its n."""
    judged = pl.col("episodes") - pl.col("env_errors").fill_null(0)
    wins = (pl.col("success_rate") * judged).round(0).cast(pl.Int64)
    text = (
        pl.when(pl.col("success_rate").is_null())
        .then(pl.lit(None))
        .otherwise(pl.format("{}/{}", wins, judged))
    )
    return frame.with_columns(text.alias("successes"))


def concat_tables(*tables: pl.DataFrame) -> pl.DataFrame:
    """One table of the per-model tables (same schema)."""
    return pl.concat(tables, how="vertical")


# ---------------------------------------------------------------- statistics


def z_score(confidence: float) -> float:
    """z with P(|Z| <= z) = ``confidence`` for a standard normal Z (1.96 at 0.95)."""
    return NormalDist().inv_cdf((1 + confidence) / 2)


def wilson_interval(
    successes: int, trials: int, confidence: float = 0.95
) -> tuple[float | None, float | None]:
    """Wilson score interval of a success rate (sound at 0 or n successes and for small n, unlike mean ± z·se)."""
    if trials == 0:
        return None, None
    z = z_score(confidence)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


#: The name the reports give :func:`paired_difference_interval`.
PAIRED_INTERVAL = "Newcombe paired score"
#: The name the reports give :func:`paired_bootstrap`.
BOOTSTRAP_INTERVAL = "paired bootstrap"


def paired_difference_interval(
    both: int, only_first: int, only_second: int, neither: int, confidence: float = 0.95
) -> tuple[float | None, float | None]:
    """Interval of the difference of two success rates measured on the same n pairs, p1 - p2 = (b - c)/n, by
    Newcombe's hybrid score method for paired data (Newcombe 1998, method 10; Fagerland, Lydersen & Laake 2014
    recommend it), from the 2x2 table a = ``both`` succeed, b = ``only_first``, c = ``only_second``, d = ``neither``::

        p1 = (a+b)/n, p2 = (a+c)/n, [l1, u1], [l2, u2] their Wilson intervals
        A = ad - bc;  psi = (A - n/2)/sqrt((a+b)(c+d)(a+c)(b+d)) if A > n/2, 0 if 0 <= A <= n/2, A/sqrt(...) if A < 0
                      (0 when a margin is 0)
        low  = p1 - p2 - sqrt((p1-l1)^2 - 2 psi (p1-l1)(u2-p2) + (u2-p2)^2)
        high = p1 - p2 + sqrt((p2-l2)^2 - 2 psi (p2-l2)(u1-p1) + (u1-p1)^2)

    Sound at 0 discordant pairs (an interval around 0) and at 0 or n successes; ``(None, None)`` when n = 0."""
    n = both + only_first + only_second + neither
    if n == 0:
        return None, None
    first, second = both + only_first, both + only_second
    p1, p2 = first / n, second / n
    l1, u1 = wilson_interval(first, n, confidence)
    l2, u2 = wilson_interval(second, n, confidence)
    margins = first * (n - first) * second * (n - second)
    cross = both * neither - only_first * only_second
    psi = 0.0
    if margins and cross > n / 2:
        psi = (cross - n / 2) / math.sqrt(margins)
    elif margins and cross < 0:
        psi = cross / math.sqrt(margins)
    low = p1 - p2 - math.sqrt((p1 - l1) ** 2 - 2 * psi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = p1 - p2 + math.sqrt((p2 - l2) ** 2 - 2 * psi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2)
    return max(-1.0, low), min(1.0, high)


def mcnemar_exact_p(only_first: int, only_second: int) -> float | None:
    """McNemar's exact two-sided p-value: under no difference the b discordant pairs won by the first of the b + c
    are Binomial(b + c, 1/2), p = min(1, 2 P(X <= min(b, c))). None with no discordant pair (nothing to test)."""
    discordant = only_first + only_second
    if discordant == 0:
        return None
    tail = sum(math.comb(discordant, k) for k in range(min(only_first, only_second) + 1))
    return min(1.0, 2 * tail / 2**discordant)


def paired_bootstrap(
    first: list[float],
    second: list[float],
    statistic: Callable[[Any, Any], Any],
    resamples: int,
    seed: int,
    confidence: float = 0.95,
) -> tuple[float | None, float | None]:
    """Percentile interval of ``statistic(first, second)`` by the paired bootstrap: ``resamples`` draws of n pairs
    with replacement (``seeding.bootstrap_indices``: numpy's generator seeded with ``seed``), the statistic of each
    (``statistic`` takes two ``(resamples, n)`` arrays and returns ``resamples`` values), and the (1 -/+
    confidence)/2 quantiles of those. ``(None, None)`` under 2 pairs (nothing to resample)."""
    import numpy as np

    if len(first) != len(second):
        raise ValueError(f"paired_bootstrap: {len(first)} first values against {len(second)} second ones")
    if len(first) < 2:
        return None, None
    (rows,) = bootstrap_indices(seed, resamples, len(first))
    values = statistic(np.asarray(first, dtype=float)[rows], np.asarray(second, dtype=float)[rows])
    low, high = np.quantile(values, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


SEEDS_INTERVAL = "two-way bootstrap (items x seeds)"


def pooled_seed_bootstrap(
    differences: Any, resamples: int, seed: int, confidence: float = 0.95
) -> tuple[float | None, float | None]:
    """Percentile interval of the mean of ``differences`` (an ``(items, seeds)`` array: one model's outcome minus
    another's on the same item, for each training seed) by the two-way bootstrap: each of ``resamples`` draws
    resamples the items and, independently, the seeds with replacement and takes the mean of the resampled grid,
    so the interval holds both sources of chance, which items were drawn and which seeds trained (with the items
    alone it would narrow as seeds are added, whatever their spread). ``(None, None)`` under 2 items."""
    import numpy as np

    grid = np.asarray(differences, dtype=float)
    items, seeds = grid.shape
    if items < 2:
        return None, None
    rows, columns = bootstrap_indices(seed, resamples, items, seeds)  # one generator: the items' draw first
    values = grid[rows[:, :, None], columns[:, None, :]].mean(axis=(1, 2))
    low, high = np.quantile(values, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


# ---------------------------------------------------------------- power: what a design could have detected


def power_multiplier(confidence: float = 0.95, power: float = 0.8) -> float:
    """``z_{1-a/2} + z_{power}``, a = 1 - ``confidence``: how many standard errors a true difference must be for a
    two-sided test at level a (its ``confidence`` interval excluding 0) to reject with probability ``power``
    (1.95996 + 0.84162 = 2.80158 at 95 % and 80 %; the far tail, rejecting with the wrong sign, is neglected)."""
    return z_score(confidence) + NormalDist().inv_cdf(power)


def minimum_detectable_effect(
    sd: float, n: int, confidence: float = 0.95, power: float = 0.8
) -> float | None:
    """Minimum detectable effect of a mean of ``n`` paired differences of standard deviation ``sd``, the normal
    approximation: ``MDE = (z_{1-a/2} + z_{power}) sd / sqrt(n)`` (:func:`power_multiplier`): the smallest true
    mean difference the design resolves (interval excluding 0) with probability ``power``. None when n = 0."""
    if n <= 0:
        return None
    return power_multiplier(confidence, power) * sd / math.sqrt(n)


def discordance_sd(only_first: float, only_second: float) -> float:
    """Standard deviation of one pair's difference of 0/1 outcomes (1, 0 or -1), from the shares of discordant
    pairs p10 = ``only_first`` (the first alone succeeds) and p01 = ``only_second``:
    ``sqrt(p10 + p01 - (p10 - p01)^2)``. With :func:`minimum_detectable_effect` it is the paired-proportion (McNemar)
    MDE ``sqrt(p10 + p01 - (p10 - p01)^2) / sqrt(n) * (z_{1-a/2} + z_{power})``; Connor's (1987) sample size puts
    the null's ``sqrt(p10 + p01)`` on the z_{1-a/2} term instead, the same to first order in (p10 - p01)^2."""
    return math.sqrt(max(0.0, only_first + only_second - (only_first - only_second) ** 2))


def interval_mde(
    low: float | None, high: float | None, confidence: float = 0.95, power: float = 0.8
) -> float | None:
    """The MDE when only a ``confidence`` interval is known (a bootstrap percentile interval): its half-width read as
    z_{1-a/2} standard errors, ``MDE = (high - low) / 2 / z_{1-a/2} * (z_{1-a/2} + z_{power})``. None without an
    interval."""
    if low is None or high is None:
        return None
    return (high - low) / 2 / z_score(confidence) * power_multiplier(confidence, power)


def pooled_seeds_mde(differences: Any, confidence: float = 0.95, power: float = 0.8) -> float | None:
    """The MDE of the mean of ``differences`` (an ``(items, seeds)`` array, as :func:`pooled_seed_bootstrap`'s) with
    the standard error that two-way bootstrap estimates: with row means r_i, column means c_j and grand mean m,
    ``se^2 = var(r)/I + var(c)/S + var(x_ij - r_i - c_j + m)/(I S)`` (population variances; one seed: the paired
    ``var(d)/n``), and ``MDE = (z_{1-a/2} + z_{power}) se``. Seeds that win and lose the same items add no power
    (the rows carry the spread); seeds that differ item by item shrink it as 1/sqrt(I S). None under 2 items."""
    import numpy as np

    grid = np.asarray(differences, dtype=float)
    items, seeds = grid.shape
    if items < 2:
        return None
    rows, columns = grid.mean(axis=1), grid.mean(axis=0)
    residual = grid - rows[:, None] - columns[None, :] + grid.mean()
    se = math.sqrt(rows.var() / items + columns.var() / seeds + residual.var() / (items * seeds))
    return power_multiplier(confidence, power) * se


def pairs_needed(effect: float, sd: float, confidence: float = 0.95, power: float = 0.8) -> int:
    """Pairs a paired design needs to detect a true mean difference ``effect`` with probability ``power``: the
    :func:`minimum_detectable_effect` formula solved for n, ``ceil(((z_{1-a/2} + z_{power}) sd / effect)^2)``."""
    return math.ceil((power_multiplier(confidence, power) * sd / effect) ** 2)


# ---------------------------------------------------------------- reflection steps saved

#: The modes reflection_retries is compared with, in order of preference: the same attempt budget R first.
STEP_BASELINES = ("independent_retries", "single")

REFLECTION_STEPS_SCHEMA = pl.Schema(
    {
        "baseline": pl.String,
        "tasks": pl.Int64,  # tasks both modes attempted
        "solved_reflection": pl.Int64,
        "solved_baseline": pl.Int64,
        "solved_both": pl.Int64,
        "steps_reflection": pl.Float64,  # mean steps of the successful trajectory, over tasks both solved
        "steps_baseline": pl.Float64,
        "steps_saved_pct": pl.Float64,  # 100 * (1 - steps_reflection / steps_baseline)
    }
)


def reflection_step_pairs(collection_log: pl.DataFrame) -> pl.DataFrame:
    """Per baseline mode the log holds and per task both it and ``reflection_retries`` attempted: whether each
    solved it and the steps of its successful trajectory (a mode stops at its first verified success, so each
    solved task has one successful trajectory per mode; an environment error solves nothing). Columns ``baseline``,
    ``task_id``, ``solved``, ``steps`` (reflection_retries), ``solved_b``, ``steps_b`` (the baseline)."""

    def per_task(mode: str) -> pl.DataFrame:
        won = pl.col("success").fill_null(False)  # an environment error solves nothing (nor fails the agent)
        return (
            collection_log.filter(pl.col("mode") == mode)
            .group_by("task_id")
            .agg(won.any().alias("solved"), pl.col("n_steps").filter(won).first().alias("steps"))
        )

    modes = set(collection_log["mode"].unique().to_list())
    schema = {"baseline": pl.String, "task_id": pl.String, "solved": pl.Boolean, "steps": pl.Int64,
              "solved_b": pl.Boolean, "steps_b": pl.Int64}  # fmt: skip
    tables = [pl.DataFrame(schema=schema)]
    if "reflection_retries" in modes:
        reflection = per_task("reflection_retries")
        tables += [
            reflection.join(per_task(baseline), on="task_id", suffix="_b")
            .sort("task_id")
            .select(pl.lit(baseline).alias("baseline"), pl.all())
            .cast(schema)
            for baseline in STEP_BASELINES
            if baseline in modes
        ]
    return pl.concat(tables)


def steps_saved_pct(steps_reflection: Any, steps_baseline: Any) -> Any:
    """% of steps reflection_retries saves over tasks both modes solved, ``100 (1 - mean(reflection) /
    mean(baseline))``: of two sequences, a number; of two ``(resamples, n)`` arrays (paired_bootstrap), one per row."""
    import numpy as np

    ours, theirs = np.asarray(steps_reflection, dtype=float), np.asarray(steps_baseline, dtype=float)
    return 100 * (1 - ours.mean(axis=-1) / theirs.mean(axis=-1))


def reflection_steps(collection_log: pl.DataFrame) -> pl.DataFrame:
    """Steps on solved tasks, ``reflection_retries`` against each baseline mode the log holds, paired: over the
    tasks both modes solved (:func:`reflection_step_pairs`). Empty when the log lacks reflection_retries or every
    baseline."""
    rows = []
    for (baseline,), paired in reflection_step_pairs(collection_log).group_by(
        "baseline", maintain_order=True
    ):
        both = paired.filter(pl.col("solved") & pl.col("solved_b"))
        ours, theirs = both["steps"].mean(), both["steps_b"].mean()
        rows.append(
            {"baseline": baseline, "tasks": paired.height, "solved_reflection": int(paired["solved"].sum()),
             "solved_baseline": int(paired["solved_b"].sum()), "solved_both": both.height,
             "steps_reflection": ours, "steps_baseline": theirs,
             "steps_saved_pct": float(steps_saved_pct(both["steps"], both["steps_b"])) if both.height and theirs
             else None}
        )  # fmt: skip
    return pl.DataFrame(rows, schema=REFLECTION_STEPS_SCHEMA)
