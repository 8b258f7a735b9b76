"""Nodes of the ``ablations`` pipeline: the collection pool, one row of facts per variant, the comparison table,
its markdown section and its plot. The variants themselves are the other stages' own nodes, reused under
namespaces with their parameters from config (see pipeline.py)."""

from __future__ import annotations

from typing import Any

import polars as pl

from rmsweb_kedro.measures.evaluation import seed_of
from rmsweb_kedro.measures.reporting import as_percent, figure_panels, markdown_table, with_counts


def collection_pool(
    sandbox_tasks: pl.DataFrame,
    sft_states_train: pl.DataFrame,
    sft_states_val: pl.DataFrame,
    sft_states_dev: pl.DataFrame,
) -> pl.DataFrame:
    """The sandbox tasks the default run's SFT model never trained on (none of its states in
    ``sft_states_train``), is not scored on (``sft_states_val``) and Salvage-DS does not choose its checkpoints on
    (``sft_states_dev``): the collection variants fine-tune that model, so a corpus on its own training tasks would
    mostly repeat what it learnt (the reflection corpus exactly), and one on dev tasks would leave dev unclean."""
    seen = pl.concat([f["task_id"] for f in (sft_states_train, sft_states_val, sft_states_dev)]).unique()
    return sandbox_tasks.filter(~pl.col("id").is_in(seen.to_list()))


#: One row of facts per variant, joined to the evaluation's comparison by ``variant``.
FACTS_SCHEMA = pl.Schema(
    {
        "variant": pl.String,
        "group": pl.String,
        "setting": pl.String,
        "train_states": pl.Int64,  # SFT states (collection variants) or RL states (Salvage-DS variants)
        "train_steps": pl.Int64,  # optimizer steps done (a wall-clock cap may stop a run before its max_steps)
        "collected_tasks": pl.Int64,
        "collection_yield": pl.Float64,
        "attempts": pl.Int64,
        "mean_steps_success": pl.Float64,  # steps of the successful collected trajectories
        "heldout_competence_before": pl.Float64,  # Salvage-DS: competence on held-out critical states
        "heldout_competence_after": pl.Float64,
    }
)


def describe_collection_variant(
    stats: dict[str, Any], states_train: pl.DataFrame, sft_metrics: dict[str, Any], variant: str, mode: str
) -> dict[str, Any]:
    """A collection-mode variant: what its collection gave (yield, attempts, steps of successes) and the SFT it
    fed (training states, steps done)."""
    summary = stats["modes"][mode]
    return {
        "variant": variant,
        "group": "collection mode",
        "setting": f"{mode}, R={stats['settings']['attempts_R']}",
        "train_states": states_train.height,
        "train_steps": sft_metrics.get("steps"),
        "collected_tasks": summary["tasks"],
        "collection_yield": summary["yield"],
        "attempts": summary["attempts"],
        "mean_steps_success": summary["mean_steps_success"],
    }


def describe_rl_variant(*reports: dict[str, Any], variant: str, group: str, setting: str) -> dict[str, Any]:
    """A Salvage-DS variant from its rounds' reports, in order (one but for ``rl_second_round``): states trained on
    and steps done (each round's longest seed), summed over the rounds; held-out competence before and after the
    last round, on its own held-out critical states (after: the mean over its training seeds' returned weights)."""
    report = reports[-1]
    runs = report["runs"].values()
    after = [run["after"].get("held_out", {}).get("competence") for run in runs]
    after = [value for value in after if value is not None]
    return {
        "variant": variant,
        "group": group,
        "setting": setting,
        "train_states": sum(r["states"]["train"] for r in reports),
        "train_steps": sum(max(run["steps"] for run in r["runs"].values()) for r in reports),
        "heldout_competence_before": report["before"].get("held_out", {}).get("competence"),
        "heldout_competence_after": sum(after) / len(after) if after else None,
    }


def describe_reference(
    states_train: pl.DataFrame, sft_metrics: dict[str, Any], variant: str
) -> dict[str, Any]:
    """The default run's SFT model: the starting point of every Salvage-DS variant."""
    return {
        "variant": variant,
        "group": "reference",
        "setting": "the default run's SFT model (Salvage-DS variants start here)",
        "train_states": states_train.height,
        "train_steps": sft_metrics.get("steps"),
    }


TABLE_COLUMNS = [
    "group", "variant", "seed", "setting", "train_states", "train_steps", "collected_tasks", "collection_yield",
    "attempts", "mean_steps_success", "heldout_competence_before", "heldout_competence_after", "n_states",
    "step_success_rate", "action_type_accuracy", "element_accuracy", "argument_match", "invalid_format_rate",
    "episodes", "env_errors", "successes", "success_rate", "success_low", "success_high", "steps_on_solved",
    "tokens_per_task",
]  # fmt: skip


def ablation_table(comparison: pl.DataFrame, *facts: dict[str, Any]) -> pl.DataFrame:
    """One row per evaluated model: its variant's facts (what was changed, what it trained on, for how long) beside
    the evaluation's offline step metrics and online success (k/n, Wilson interval) from ``model_comparison``; a
    Salvage-DS variant has a row a training seed (its models ``<variant>_s<seed>``, ``seed`` saying which)."""
    described = pl.DataFrame(list(facts), schema=FACTS_SCHEMA)
    variants = described["variant"].to_list()

    def variant_of(label: str) -> tuple[str | None, int | None]:
        if label in variants:
            return label, None
        return next(((v, s) for v in variants if (s := seed_of(label, v)) is not None), (None, None))

    found = [variant_of(label) for label in comparison["model"]]
    missing = {v for v, _ in found if v is not None} ^ set(variants) | {
        label for label, (v, _) in zip(comparison["model"], found, strict=True) if v is None
    }
    if missing:
        raise ValueError(f"ablations: variants and evaluated models differ: {sorted(missing)}")
    keyed = with_counts(comparison).with_columns(
        pl.Series("variant", [v for v, _ in found], dtype=pl.String),
        pl.Series("seed", [s for _, s in found], dtype=pl.Int64),
    )
    return described.join(keyed, on="variant", how="left").select(TABLE_COLUMNS)


def ablation_section(
    table: pl.DataFrame,
    claims: pl.DataFrame,
    steps: pl.DataFrame,
    collect_tasks: int,
    sft_steps: int,
    salvage_ds_steps: int,
    online: bool,
) -> str:
    """The report's "Ablations" section (markdown): the table, the claims between variants (``ablation_claims``:
    paired differences with their intervals and MDEs), the paired reflection-steps table, the budget
    (``ablations.budget``: tasks collected per mode, SFT and Salvage-DS steps per variant; whether the variants were
    evaluated online) and the plot."""
    return "\n\n".join(
        [
            "## Ablations",
            "Each variant is a stage of the recipe re-run under the namespace `ablations.<variant>` with one "
            "setting changed (`kedro run --pipelines ablations`; docs/ablations.md). Rates in %. **Budgets are "
            "smaller than the default run's** (conf/base/parameters_ablations.yml `ablations.budget`): "
            f"collection on {collect_tasks} tasks per mode, SFT {sft_steps} steps per corpus (each fine-tuning "
            "the recipe's SFT model), "
            f"Salvage-DS {salvage_ds_steps} steps per variant; "
            "`train_steps` is what each run did. Offline metrics are on the same held-out states for every "
            "variant (`n_states`); online success is k/n judged episodes with its Wilson interval"
            + ("" if online else " (online evaluation off in this run)")
            + ".",
            ablation_markdown(table).strip(),
            "### Claims between variants (paired: online by task and run, offline by held-out state; `resolved`: "
            "the interval excludes 0; `mde`: the smallest true difference this `n` would have resolved at "
            "`evaluate.power`, 80 % by default: a claim not resolved may still hold below it)",
            markdown_table(claims),
            "### Reflection steps saved (the collection-mode ablation, paired on the tasks both modes solved)",
            markdown_table(steps),
            "![ablations](ablations/ablations.png)",
        ]
    )


def ablation_markdown(table: pl.DataFrame) -> str:
    """The comparison table alone as markdown (rates in %), for the catalog's ``.md`` copy."""
    shown = as_percent(
        table,
        ["collection_yield", "heldout_competence_before", "heldout_competence_after", "step_success_rate",
         "action_type_accuracy", "element_accuracy", "argument_match", "invalid_format_rate", "success_rate",
         "success_low", "success_high"],
    )  # fmt: skip
    return markdown_table(shown) + "\n"


def plot_ablations(table: pl.DataFrame):
    """Offline step success per variant, and online success with its Wilson interval (n in the label)."""
    fig, (offline, online) = figure_panels(2)
    labels = table["variant"].to_list()
    groups = table["group"].to_list()
    colours = {g: f"C{i}" for i, g in enumerate(dict.fromkeys(groups))}
    positions = list(range(len(labels)))
    steps = [100 * (v or 0.0) for v in table["step_success_rate"].to_list()]
    offline.barh(positions, steps, color=[colours[g] for g in groups])
    offline.set_yticks(positions, labels, fontsize=8)
    offline.invert_yaxis()
    offline.set_xlabel("offline step success (%)")
    offline.set_title("Offline, held-out states")
    for group, colour in colours.items():
        offline.bar([0], [0], color=colour, label=group)
    offline.legend(fontsize=7)
    for position, row in zip(positions, table.iter_rows(named=True), strict=True):
        if row["success_rate"] is None:
            continue
        rate = 100 * row["success_rate"]
        # max(0, ...): the Wilson bound at 0 successes can sit a rounding error above the rate
        error = [[max(0.0, rate - 100 * row["success_low"])], [max(0.0, 100 * row["success_high"] - rate)]]
        online.errorbar([rate], [position], xerr=error, fmt="o", capsize=3, color=colours[row["group"]])
    online.set_yticks(positions, [f"{v} ({s or '–'})" for v, s in zip(labels, table["successes"], strict=True)],
                      fontsize=8)  # fmt: skip
    online.invert_yaxis()
    online.set_xlim(-5, 105)
    online.set_xlabel("online success (%), Wilson interval; k/n in the label")
    online.set_title("Online, sandbox")
    fig.set_size_inches(13, 0.45 * len(labels) + 2)
    fig.tight_layout()
    return fig
