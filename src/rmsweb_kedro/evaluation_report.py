"""The evaluation's report, the library part: the comparison table, collection statistics, failure modes, training
curves and the paper's claims beside what this run measured, as tables, figures, markdown and HTML. Plots are
matplotlib figures (catalog datasets save them); tables, figures and statistics are made with
:mod:`rmsweb_kedro.reporting`. Used by the ``evaluate`` pipeline and, for its re-rendered report, ``ablations``. A
library module: typed configs (:class:`~rmsweb_kedro.evaluation.EvaluateParams`), no catalog names, no ``params:``.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from rmsweb_kedro.evaluation import Claim, EvaluateParams
from rmsweb_kedro.mining import EpisodeFailure, classify_episode
from rmsweb_kedro.reporting import as_percent, figure_panels, markdown_table, with_counts

# ---------------------------------------------------------------- collection statistics


#: The columns of the collection table, from the collect pipeline's ``collection_stats`` (per mode).
COLLECTION_COLUMNS = {
    "tasks": pl.Int64,
    "attempts": pl.Int64,
    "env_errors": pl.Int64,
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


def measures(comparison: pl.DataFrame, steps: pl.DataFrame) -> dict[str, tuple[float | None, str]]:
    """How this run measures each claim key, from the comparison table and the paired reflection-steps table:
    key -> (value, how)."""

    def success(model: str) -> float | None:
        row = comparison.filter(pl.col("model") == model)
        return row["success_rate"][0] if row.height and row["success_rate"][0] is not None else None

    def points(a: str, b: str) -> tuple[float | None, str]:
        sa, sb = success(a), success(b)
        what = f"online success of {a} minus {b}, in points"
        return (None, what + " (not measured)") if sa is None or sb is None else (100 * (sa - sb), what)

    saved: tuple[float | None, str] = (
        None,
        "not measured in this run: needs reflection_retries and single/independent_retries collections "
        "(the ablations pipeline, or collect.modes with several modes)",
    )
    row = next((r for r in steps.iter_rows(named=True) if r["steps_saved_pct"] is not None), None)
    if row:
        saved = (
            row["steps_saved_pct"],
            f"steps of the successful collected trajectory, reflection_retries vs {row['baseline']}, % fewer, "
            f"over the {row['solved_both']} tasks both solved (of {row['tasks']})",
        )
    return {
        "rmsweb_minus_sft_points": points("rmsweb", "sft"),
        "sft_minus_base_points": points("sft", "base"),
        "reflection_steps_saved_pct": saved,
    }


def claims_table(comparison: pl.DataFrame, steps: pl.DataFrame, claims: list[Claim]) -> pl.DataFrame:
    """The paper's claims (parameters) beside this run's figure and whether the direction agrees: every claim is
    stated as a gain (points gained, % of steps saved), so agreeing means a positive figure."""
    measured = measures(comparison, steps)
    rows = []
    for claim in claims:
        value, how = measured.get(claim.key, (None, f"unknown measure {claim.key!r}"))
        rows.append(
            {"claim": claim.claim, "paper": claim.paper, "this_run": value, "measured_as": how,
             "same_direction": None if value is None else value > 0,
             "within_paper_range": None if value is None or claim.paper_low is None or claim.paper_high is None
             else claim.paper_low <= value <= claim.paper_high}
        )  # fmt: skip
    return pl.DataFrame(
        rows,
        schema={"claim": pl.String, "paper": pl.String, "this_run": pl.Float64, "measured_as": pl.String,
                "same_direction": pl.Boolean, "within_paper_range": pl.Boolean},
    )  # fmt: skip


# ---------------------------------------------------------------- plots


def plot_success_vs_cost(comparison: pl.DataFrame):
    """Online success (with its interval) against cost per task: the accuracy-cost trade-off."""
    fig, (ax,) = figure_panels()
    for row in comparison.iter_rows(named=True):
        if row["success_rate"] is None:
            continue
        # Token count stands in for cost when the cost model prices everything at 0 (a local run).
        x = row["cost_per_task_usd"] or row["tokens_per_task"] or 0.0
        err = [
            [100 * (row["success_rate"] - row["success_low"])],
            [100 * (row["success_high"] - row["success_rate"])],
        ]
        ax.errorbar([x], [100 * row["success_rate"]], yerr=err, fmt="o", capsize=4)
        ax.annotate(row["model"], (x, 100 * row["success_rate"]), textcoords="offset points", xytext=(6, 4))
    priced = comparison["cost_per_task_usd"].drop_nulls().sum() > 0 if comparison.height else False
    ax.set_xlabel("cost per task (USD)" if priced else "tokens per task (cost model prices them at 0)")
    ax.set_ylabel("success rate (%)")
    ax.set_title("Success vs cost")
    ax.set_ylim(-5, 105)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_steps_on_solved(episodes: pl.DataFrame):
    """Histogram of the steps taken on solved tasks, per model."""
    fig, (ax,) = figure_panels()
    solved = episodes.filter(pl.col("success").fill_null(False))
    top = int(solved["n_steps"].max() or 1) if solved.height else 1
    for model in episodes["model"].unique(maintain_order=True).to_list():
        steps = solved.filter(pl.col("model") == model)["n_steps"].to_list()
        ax.hist(
            steps, bins=range(1, top + 2), alpha=0.5, label=f"{model} ({len(steps)} solved)", align="left"
        )
    ax.set_xlabel("steps on a solved task")
    ax.set_ylabel("episodes")
    ax.set_title("Steps on solved tasks")
    if episodes.height:
        ax.legend()
    fig.tight_layout()
    return fig


#: The report's words for mining's episode taxonomy (a wrong answer and a wrong final state are both a wrong outcome).
EPISODE_FAILURE_WORDS = {
    EpisodeFailure.ENVIRONMENT_ERROR: "environment error",
    EpisodeFailure.STEP_LIMIT: "ran out of steps",
    EpisodeFailure.MODEL_ERROR: "unparseable output",
    EpisodeFailure.WRONG_ANSWER: "wrong outcome",
    EpisodeFailure.WRONG_STATE: "wrong outcome",
    EpisodeFailure.OTHER: "wrong outcome",
}


def failure_modes(predictions: pl.DataFrame, episodes: pl.DataFrame) -> pl.DataFrame:
    """Counts per model of why a step was wrong offline and why an episode failed online: mining's taxonomy
    (``mining.FailureMode``, which scoring labels every reply with; ``mining.EpisodeFailure`` for episodes), in
    words."""
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
    return pl.concat([offline, online]).group_by("model", "where", "mode", maintain_order=True).len("count")


def plot_failure_modes(modes: pl.DataFrame):
    """Stacked bars per model: failure modes of offline steps and online episodes."""
    fig, panels = figure_panels(2)
    for ax, where in zip(panels, ("offline step", "online episode"), strict=True):
        part = modes.filter(pl.col("where") == where)
        models = part["model"].unique(maintain_order=True).to_list()
        bottom = [0] * len(models)
        for mode in sorted(part["mode"].unique().to_list()):
            counts = [
                int(part.filter((pl.col("model") == m) & (pl.col("mode") == mode))["count"].sum())
                for m in models
            ]
            ax.bar(models, counts, bottom=bottom, label=mode)
            bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
        ax.set_title(f"Failure modes: {where}s")
        ax.set_ylabel("count")
        if models:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def history_rows(metrics: Any) -> list[dict[str, Any]]:
    """Training history rows ``{"step", "train/loss", "eval/loss", ...}`` (as the training loop's
    ``LoopResult.history``) from a table, a list of rows, or a dict holding them under ``history``."""
    if metrics is None:
        return []
    if isinstance(metrics, pl.DataFrame):
        return metrics.to_dicts()
    if isinstance(metrics, dict):
        return list(metrics.get("history", []))
    return list(metrics)


def plot_training_curves(sft_metrics: Any, salvage_ds_metrics: Any):
    """Loss curves of SFT and Salvage-DS (every ``*loss*`` series of each history, by optimizer step)."""
    fig, panels = figure_panels(2)
    for ax, (name, metrics) in zip(
        panels, (("SFT", sft_metrics), ("Salvage-DS", salvage_ds_metrics)), strict=True
    ):
        rows = [r for r in history_rows(metrics) if "step" in r]
        series = sorted({k for r in rows for k in r if "loss" in k})
        for key in series:
            points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            ax.plot(*zip(*points, strict=True), label=key, marker="." if len(points) < 20 else None)
        ax.set_title(f"{name} training" + ("" if series else " (no history)"))
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("loss")
        if series:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- the report


def online_caveat(comparison: pl.DataFrame, confidence: float) -> str:
    """One honest sentence on what the online episodes can tell apart at this n."""
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
    return (
        f"Online figures rest on {int(n.min())}–{int(n.max())} judged episodes per model; intervals are up to "
        f"{100 * widest:.0f} points wide, so differences inside them are not resolved at this n."
    )


def build_report(
    comparison: pl.DataFrame,
    breakdown: pl.DataFrame,
    claims: pl.DataFrame,
    collection: pl.DataFrame,
    steps: pl.DataFrame,
    modes: pl.DataFrame,
    config: EvaluateParams,
    manifest: dict[str, Any] | None = None,
    ablations: str | None = None,
) -> str:
    """``report.md``: the run manifest (``provenance.manifest_markdown``: commit, packages, seeds, checkpoints,
    judges, hardware, MLflow run), what was compared and how, the tables, the figures (files beside the report);
    with ``ablations`` (the ablations pipeline's markdown section), that section too."""
    from rmsweb_kedro.provenance import manifest_markdown

    online = config.online
    rate_columns = ["action_type_accuracy", "element_accuracy", "argument_match", "step_success_rate",
                    "invalid_format_rate", "success_rate", "success_low", "success_high", "run_std"]  # fmt: skip
    offline_cols = ["model", "n_states", "action_type_accuracy", "element_accuracy", "argument_match",
                    "step_success_rate", "invalid_format_rate"]  # fmt: skip
    online_cols = ["model", "episodes", "env_errors", "successes", "success_rate", "success_low", "success_high",
                   "run_std", "steps_on_solved", "tokens_per_task", "cost_per_task_usd", "wall_s_per_task"]  # fmt: skip
    table = as_percent(with_counts(comparison), rate_columns)
    figures = "\n".join(f"![{name}]({path})" for name, path in config.figures.items())
    sections = [
        "# RMSWeb evaluation report",
        manifest_markdown(manifest),
        "Rates in %. Online success is over judged episodes (environment failures are counted apart, never as the "
        f"agent's failure); `successes` gives k/n; the interval is Wilson's at {config.confidence:.0%} over all "
        f"episodes of {online.runs} run(s); `run_std` is the spread of the per-run rates.",
        f"Online protocol: sandbox splits {online.splits}, up to {online.max_tasks} tasks on the training sites and "
        f"{online.max_held_out_tasks} on the held-out sites {online.held_out_sites}, max {online.max_steps} steps, "
        f"{'greedy' if online.greedy else f'sampled (T={online.temperature})'} decoding, judge: the sandbox "
        f"checker. Cost model: {config.cost.prompt_usd_per_million} / {config.cost.completion_usd_per_million} USD "
        "per million prompt / completion tokens.",
        "## Offline step metrics (held-out states)",
        markdown_table(table.select([c for c in offline_cols if c in table.columns])),
        "## Online success in the sandbox",
        markdown_table(table.select([c for c in online_cols if c in table.columns])),
        online_caveat(comparison, config.confidence),
        "### By site group, site and level",
        markdown_table(as_percent(breakdown, ["success_rate", "success_low", "success_high"])),
        "## The paper's claims and this run",
        markdown_table(claims),
        "A toy-scale default run (tiny model, minutes of CPU) shows whether each stage works and points the right "
        "way, not the paper's sizes; the production configuration (`--env production`) is where sizes are measured.",
        "## Collection statistics",
        markdown_table(as_percent(collection, ["yield"])),
        "### Steps on solved tasks: reflection_retries vs the other modes (paired, same tasks, same budget)",
        markdown_table(steps),
        "## Failure modes",
        markdown_table(modes),
        "## Figures",
        figures or "_(no figures configured)_",
    ]
    if ablations:
        sections.append(ablations.strip())
    return "\n\n".join(sections) + "\n"


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
