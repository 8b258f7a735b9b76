"""What every report and plot of the project is made with: figures, markdown tables, rates as %, the Wilson interval,
and the tables two pipelines both report (per-model tables gathered, reflection steps saved).

A library module: no catalog names, no ``params:``. Figures are made without pyplot (no global state, nothing left
open, no backend to choose); catalog datasets save them.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import polars as pl

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


def reflection_steps(collection_log: pl.DataFrame) -> pl.DataFrame:
    """Steps on solved tasks, ``reflection_retries`` against each baseline mode the log holds, paired: over the
    tasks both modes solved (a mode stops at its first verified success, so each solved task has one successful
    trajectory per mode). Empty when the log lacks reflection_retries or every baseline."""

    def per_task(mode: str) -> pl.DataFrame:
        won = pl.col("success").fill_null(False)  # an environment error solves nothing (nor fails the agent)
        return (
            collection_log.filter(pl.col("mode") == mode)
            .group_by("task_id")
            .agg(won.any().alias("solved"), pl.col("n_steps").filter(won).first().alias("steps"))
        )

    modes = set(collection_log["mode"].unique().to_list())
    rows = []
    if "reflection_retries" in modes:
        reflection = per_task("reflection_retries")
        for baseline in (m for m in STEP_BASELINES if m in modes):
            paired = reflection.join(per_task(baseline), on="task_id", suffix="_b")
            both = paired.filter(pl.col("solved") & pl.col("solved_b"))
            ours, theirs = both["steps"].mean(), both["steps_b"].mean()
            rows.append(
                {"baseline": baseline, "tasks": paired.height, "solved_reflection": int(paired["solved"].sum()),
                 "solved_baseline": int(paired["solved_b"].sum()), "solved_both": both.height,
                 "steps_reflection": ours, "steps_baseline": theirs,
                 "steps_saved_pct": 100 * (1 - ours / theirs) if both.height and theirs else None}
            )  # fmt: skip
    return pl.DataFrame(rows, schema=REFLECTION_STEPS_SCHEMA)
