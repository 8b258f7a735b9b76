"""The evaluation report's figures: success against cost, steps on solved tasks, failure modes, the held-out
states that flipped between two models and the training curves, as matplotlib figures (catalog datasets save
them). The tables they draw are :mod:`rmsweb_kedro.measures.report`'s. Used by the ``evaluate`` pipeline."""

from __future__ import annotations

from typing import Any

import polars as pl

from rmsweb_kedro.measures.report import flips
from rmsweb_kedro.measures.reporting import figure_panels


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


def plot_failure_modes(modes: pl.DataFrame):
    """Stacked bars per model: failure modes of offline steps, of online episodes' first wrong steps, and of
    online episodes; a mode keeps its colour in every panel, and each legend sits under its panel."""
    from matplotlib import colormaps

    palette = colormaps["tab20"]
    colours = {
        mode: palette(i % palette.N) for i, mode in enumerate(sorted(modes["mode"].unique().to_list()))
    }
    fig, panels = figure_panels(3, panel_size=(6.0, 5.5))
    for ax, where in zip(panels, ("offline step", "online first wrong step", "online episode"), strict=True):
        part = modes.filter(pl.col("where") == where)
        models = part["model"].unique(maintain_order=True).to_list()
        bottom = [0] * len(models)
        for mode in sorted(part["mode"].unique().to_list()):
            counts = [
                int(part.filter((pl.col("model") == m) & (pl.col("mode") == mode))["count"].sum())
                for m in models
            ]
            ax.bar(models, counts, bottom=bottom, label=mode, color=colours[mode])
            bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
        ax.set_title(f"Failure modes: {where}s")
        ax.set_ylabel("count")
        if models:
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def plot_flips(predictions: pl.DataFrame, first: str = "rmsweb", second: str = "sft"):
    """Which held-out states flipped between ``second`` and ``first`` (each training seed of ``first``): bars up
    for the states ``first`` won, down for those ``second`` won, split by what the state asks for (step kind), the
    net count above each bar."""
    from matplotlib import colormaps

    flipped = flips(predictions, first, second)
    models = flipped["model"].unique(maintain_order=True).to_list()
    kinds = sorted(flipped["step_kind"].unique().to_list())
    palette = colormaps["tab20"]
    fig, (ax,) = figure_panels(panel_size=(max(5.0, 1.6 * len(models) + 3), 4.5))
    for side, sign in ((first, 1), (second, -1)):
        bottom = [0] * len(models)
        for index, kind in enumerate(kinds):
            counts = [
                sign
                * flipped.filter(
                    (pl.col("model") == m) & (pl.col("won_by") == side) & (pl.col("step_kind") == kind)
                ).height
                for m in models
            ]
            ax.bar(
                models,
                counts,
                bottom=bottom,
                color=palette(index % palette.N),
                label=kind if sign > 0 else None,
            )
            bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    for x, model in enumerate(models):
        won = flipped.filter(pl.col("model") == model)["won_by"]
        ax.annotate(f"net {int((won == first).sum() - (won == second).sum()):+d}", (x, 0), ha="center",
                    xytext=(0, 4), textcoords="offset points", fontsize=8)  # fmt: skip
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel(f"held-out states won by {first} (up) / by {second} (down)")
    ax.set_title(f"States that flipped, {first} against {second}" + ("" if models else " (none)"))
    if kinds:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
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
    """Loss curves of SFT and Salvage-DS (every ``*loss*`` series of each history, by optimizer step; a line a
    training seed where the history has a ``seed`` column)."""
    fig, panels = figure_panels(2)
    for ax, (name, metrics) in zip(
        panels, (("SFT", sft_metrics), ("Salvage-DS", salvage_ds_metrics)), strict=True
    ):
        rows = [r for r in history_rows(metrics) if "step" in r]
        series = sorted({k for r in rows for k in r if "loss" in k})
        seeds = list(dict.fromkeys(r.get("seed") for r in rows))
        for key in series:
            for seed in seeds:
                points = [
                    (r["step"], r[key]) for r in rows if r.get(key) is not None and r.get("seed") == seed
                ]
                label = key if seed is None or len(seeds) == 1 else f"{key}, seed {seed}"
                if points:
                    ax.plot(*zip(*points, strict=True), label=label, marker="." if len(points) < 20 else None)
        ax.set_title(f"{name} training" + ("" if series else " (no history)"))
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("loss")
        if series:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
