"""Nodes of the ``salvage_ds`` pipeline: split the critical states, train on the shared loop, report, plot."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import Field, model_validator

from rmsweb_kedro.contracts.schema import conform_states
from rmsweb_kedro.contracts.seeding import draw_states
from rmsweb_kedro.measures.reporting import figure_panels
from rmsweb_kedro.training.loop import clear_earlier_run
from rmsweb_kedro.training.salvage_ds import SalvageDSJob
from rmsweb_kedro.trajectories.states import split_by_task as states_split_by_task

logger = logging.getLogger(__name__)


class SalvageDSNodeParams(SalvageDSJob):
    """``params:salvage_ds`` (conf/base/parameters_salvage_ds.yml): a :class:`SalvageDSJob` (the algorithm, loop,
    prompt, dev samples, seed and sampler of one run) and what the stage adds around its runs."""

    #: the training seeds (``loop.seed`` of each run): one RL run from the same SFT checkpoint a seed, each into
    #: ``loop.output_dir/seed_<s>``; ``evaluate`` scores every one and pools them
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], min_length=1)
    held_out_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    max_eval_states: int = Field(16, ge=0, description="critical states scored before/after, each split")
    max_dev_states: int | None = Field(
        None, ge=1, description="dev states scored (and selected on); None: all"
    )
    eval_samples: int = Field(4, ge=1, description="sampled replies a state in the before/after report")
    #: None: train in this process. A name: ``accelerate launch --config_file <accelerate_dir>/<name>.yaml``.
    launch: str | None = None
    accelerate_dir: str = "conf/base/accelerate"
    #: launched: how the processes load the SFT policy, ``modeling.LoadConfig``'s fields but path, lora and device
    #: (``training.launch.job_checkpoint``), e.g. ``{attn_implementation: flash_attention_2, dtype: bfloat16}``
    launch_load: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _load_fields(self) -> SalvageDSNodeParams:
        from rmsweb_kedro.models.modeling import LoadConfig

        reserved = {"path", "lora", "device"} & set(self.launch_load)
        if reserved:
            raise ValueError(
                f"salvage_ds.launch_load: {sorted(reserved)} are set by the stage (the saved SFT policy, its "
                "adapter, each process's accelerator); remove them"
            )
        LoadConfig.model_validate({"path": "-", **self.launch_load})  # names a field it lacks: extra="forbid"
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"salvage_ds.seeds {self.seeds} repeats a seed: each seed is one run")
        return self

    def for_seed(self, seed: int) -> SalvageDSNodeParams:
        """These parameters for the run of training seed ``seed``: its loop seed and its own output folder."""
        loop = self.loop.model_copy(
            update={"seed": seed, "output_dir": str(Path(self.loop.output_dir) / f"seed_{seed}")}
        )
        return self.model_copy(update={"loop": loop})


def split_by_task(
    states: pl.DataFrame, held_out_fraction: float, seed: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(train, held_out)`` critical states, whole tasks held out (``states.split_by_task``, as sft_data splits).
    Tables from before a STATE_SCHEMA column existed get its default (``schema.conform_states``)."""
    return states_split_by_task(conform_states(states, "critical_states"), held_out_fraction, seed)


def train_rmsweb_models(
    sft_model: Any,
    critical_states: pl.DataFrame,
    dev_states: pl.DataFrame,
    sft_states_train: pl.DataFrame,
    params: dict[str, Any],
) -> tuple[dict[int, Any], pl.DataFrame, dict[str, Any]]:
    """Salvage-DS from the SFT model on the critical states, once per training seed: ``(rmsweb_models,
    salvage_ds_metrics, report)``, the models by seed.

    Each run scores the dev split (``sft_states_dev``: no other stage trains or evaluates on it) before training
    and every ``loop.eval_every`` updates, and returns the best of those weights, the SFT policy's included
    (``loop.select_metric``): the report names the step (0: Salvage-DS did not beat SFT on dev, and the SFT policy
    is returned). Step success rate, competence and valid rate (rmsweb_kedro.measures.scoring) are measured before
    and after (the returned weights) on ``train`` (trained critical states), ``held_out`` (critical states of
    held-out tasks) and ``dev``, each from the same seeded random numbers, outside the training's RNG stream.
    ``sft_states_train`` feeds the SFT replay term (``algorithm.eta`` > 0)."""
    from rmsweb_kedro.models.modeling import LoadedModel
    from rmsweb_kedro.training.salvage_ds import competence_eval_fn

    config = SalvageDSNodeParams.model_validate(params)
    model, processor = sft_model
    train, held_out = split_by_task(critical_states, config.held_out_fraction, config.seed)
    dev = draw_states(dev_states, config.max_dev_states, config.seed)
    report: dict[str, Any] = {
        "states": {"train": train.height, "held_out": held_out.height, "dev": dev.height},
        "params": config.model_dump(mode="json"),
        "seeds": config.seeds,
    }
    _check_splits(train, held_out, dev, critical_states.height)
    splits = {
        "train": draw_states(train, config.max_eval_states, config.seed).to_dicts(),
        "held_out": draw_states(held_out, config.max_eval_states, config.seed).to_dicts(),
        "dev": dev.to_dicts(),
    }
    report["states"]["scored"] = {split: len(rows) for split, rows in splits.items()}
    scoring = competence_eval_fn(
        splits, config.algorithm, processor, config.prompt, config.eval_samples, config.seed
    )
    report["before"] = _by_split(scoring(model))
    models, histories, runs = {}, [], {}
    for seed in config.seeds:
        run = config.for_seed(seed)
        result = _train_seed(sft_model, train, dev, sft_states_train, run, config.seeds)
        after = scoring(result.model)
        models[seed] = LoadedModel(result.model, processor)
        history = pl.from_dicts(result.history, infer_schema_length=None)
        histories.append(history.with_columns(pl.lit(seed).alias("seed")))
        runs[str(seed)] = _seed_report(result, after, history, Path(run.loop.output_dir))
        logger.info("salvage_ds seed %d: %d updates (%s), returned %s (%s %s); trained groups by origin %s", seed,
                    result.step, result.stop_reason or "max_steps", runs[str(seed)]["returned"],
                    run.loop.select_metric, result.best_value, runs[str(seed)]["trained_groups_by_origin"])  # fmt: skip
    report["runs"] = runs
    history = pl.concat(histories, how="diagonal_relaxed")
    return models, history.select("seed", "step", pl.exclude("seed", "step")), report


def _check_splits(train: pl.DataFrame, held_out: pl.DataFrame, dev: pl.DataFrame, critical: int) -> None:
    """Raise when there is nothing to train on, or no dev state to choose the returned checkpoint by."""
    if train.height == 0:
        raise ValueError(
            "salvage_ds: critical_states holds no state to train on (after holding out "
            f"{held_out.height} of {critical} for the report): mining found none; see mining_report"
        )
    if dev.height == 0:
        raise ValueError(
            "salvage_ds: sft_states_dev is empty, and the dev split is what the returned checkpoint is chosen on: "
            "set sft_data.dev_tasks > 0"
        )


def _train_seed(
    sft_model: Any,
    train: pl.DataFrame,
    dev: pl.DataFrame,
    replay: pl.DataFrame,
    run: SalvageDSNodeParams,
    seeds: list[int],
):
    """One seed's run (``run``: :meth:`SalvageDSNodeParams.for_seed`), in this process or launched, into its own
    folder, which a fresh run empties first."""
    output_dir = Path(run.loop.output_dir)
    clear_earlier_run(
        output_dir, resume=run.loop.resume
    )  # a fresh run must not mix with an older run's files
    logger.info("salvage_ds: seed %d of %s, into %s", run.loop.seed, seeds, output_dir)
    if run.launch:
        return _train_launched(sft_model, train, dev, replay, run)
    model, processor = sft_model
    return _train_here(model, processor, train, dev, replay, run)


def _seed_report(
    result: Any, after: dict[str, float], history: pl.DataFrame, output_dir: Path
) -> dict[str, Any]:
    """A seed's entry in the report: its steps and why it stopped before ``loop.max_steps`` (None: it did not), the
    returned weights and their scores, its trained groups by the states' ``origin`` and the means of its history."""
    return {
        "steps": result.step,
        "stop_reason": result.stop_reason,  # e.g. "sampled_action_budget spent (...) at update 58"
        "best_step": result.best_step,  # the returned weights' step (0: the SFT policy)
        "best_dev": result.best_value,  # their loop.select_metric
        "returned": "sft" if result.best_step == 0 else f"step {result.best_step}",
        "after": _by_split(after),
        "resumed_from": result.resumed_from,
        "stopped_early": result.stopped_early,
        "trained_groups_by_origin": trained_groups_by_origin(read_group_log(output_dir)),
        "means": {
            c.removeprefix("train/"): history[c].mean() for c in history.columns if c.startswith("train/")
        },
    }


def _train_here(
    model: Any,
    processor: Any,
    train: pl.DataFrame,
    dev: pl.DataFrame,
    replay: pl.DataFrame,
    config: SalvageDSNodeParams,
):
    """One seed's run in this process, on a copy of the SFT weights (every seed starts from the same ones); the
    node's parameters hold every :class:`SalvageDSJob` field (``training.salvage_ds.run.train_job``)."""
    import copy

    from rmsweb_kedro.training.salvage_ds import dev_eval_fn, train_job

    eval_fn = dev_eval_fn(dev.to_dicts(), config, processor)
    return train_job(copy.deepcopy(model), processor, train.to_dicts(), config, eval_fn, replay.to_dicts())


def choose_rmsweb_model(rmsweb_models: dict[int, Any], report: dict[str, Any]) -> Any:
    """``rmsweb_model``, the one checkpoint a user takes on (``live`` acts with it): the seed whose returned weights
    scored highest on dev (``report['runs'][seed]['best_dev']``; the first seed of equals). Every seed stays in
    ``rmsweb_models``, and ``evaluate`` reports them all."""
    runs = report["runs"]
    chosen = max(report["seeds"], key=lambda s: (runs[str(s)]["best_dev"] or 0.0, -report["seeds"].index(s)))
    logger.info("rmsweb_model: seed %d (dev %s)", chosen, runs[str(chosen)]["best_dev"])
    model = rmsweb_models[chosen]
    return model() if callable(model) else model


def _train_launched(
    policy: Any, train: pl.DataFrame, dev: pl.DataFrame, replay: pl.DataFrame, config: SalvageDSNodeParams
):
    """Run the Salvage-DS entry point under ``accelerate launch`` (``training.launch``) and load what it saved."""
    from rmsweb_kedro.models.modeling import save_checkpoint
    from rmsweb_kedro.training.launch import run_launched

    work = Path(config.loop.output_dir) / "launch"
    work.mkdir(parents=True, exist_ok=True)
    save_checkpoint(policy.model, policy.processor, work / "policy")  # a LoRA policy as base + adapter
    policy.model.to("cpu")  # the launched processes need the accelerators' memory
    for name, frame in (("train", train), ("dev", dev), ("replay", replay)):
        frame.write_parquet(work / f"{name}.parquet")
    job = launch_job(work, config)
    return run_launched(config.launch, config.accelerate_dir, "rmsweb_kedro.training.salvage_ds", job)


def launch_job(work: Path, config: SalvageDSNodeParams) -> dict[str, Any]:
    """The job of the launched entry point (``training.salvage_ds.run.main``) for files under ``work``: the saved
    policy ``work/policy`` with its load config (``launch_load``), ``train.parquet``, ``dev.parquet``,
    ``replay.parquet`` and the :class:`SalvageDSJob` fields of ``config``."""
    from rmsweb_kedro.training.launch import job_checkpoint

    policy = str(work / "policy")
    return {
        "model_dir": policy,
        "checkpoint": job_checkpoint(policy, {"path": policy, **config.launch_load}),
        **{f"{name}_path": str(work / f"{name}.parquet") for name in ("train", "dev", "replay")},
        "output_dir": config.loop.output_dir,
        "config": config.model_dump(mode="json", include=set(SalvageDSJob.model_fields)),
    }


def _by_split(row: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{'eval/<split>/<metric>': v}`` -> ``{split: {metric: v}}``."""
    nested: dict[str, dict[str, float]] = {}
    for key, value in row.items():
        _, split, metric = key.split("/")
        nested.setdefault(split, {})[metric] = value
    return nested


#: ``salvage_ds_groups``: every sampled group of every seed's run (``training.salvage_ds.run.GROUP_LOG``'s records;
#: ``origin`` null where the trained states carry none).
GROUPS_SCHEMA = pl.Schema(
    {"seed": pl.Int64, "batch": pl.Int64, "round": pl.Int64, "state_id": pl.String, "origin": pl.String,
     "policy_version": pl.Int64, "samples": pl.List(pl.String), "rewards": pl.List(pl.Float64), "n_right": pl.Int64,
     "decision": pl.String, "reason": pl.String, "rank": pl.Int64}
)  # fmt: skip


def read_group_log(output_dir: Path) -> pl.DataFrame:
    """A run's group log (``output_dir/groups.jsonl``) in :data:`GROUPS_SCHEMA` but ``seed``; logs written before a
    column existed get it null."""
    from rmsweb_kedro.training.salvage_ds import GROUP_LOG

    path = output_dir / GROUP_LOG
    if not path.exists():
        raise FileNotFoundError(f"{path}: the run's group log is missing (its run sampled no group?)")
    return pl.read_ndjson(path, schema={k: v for k, v in GROUPS_SCHEMA.items() if k != "seed"})


def trained_groups_by_origin(groups: pl.DataFrame) -> dict[str, int]:
    """How many groups a run trained (accepted or anchored), by their state's ``origin`` (``unknown`` where none)."""
    trained = groups.filter(pl.col("decision").is_in(["accepted", "anchored"]))
    counts = trained.group_by(pl.col("origin").fill_null("unknown")).len().sort("origin")
    return dict(zip(counts["origin"].to_list(), counts["len"].to_list(), strict=True))


def gather_groups(report: dict[str, Any], params: dict[str, Any]) -> pl.DataFrame:
    """``salvage_ds_groups``: the group logs the runs of ``report['seeds']`` wrote under their output folders
    (``loop.output_dir/seed_<s>/groups.jsonl``), one table with the seed."""
    config = SalvageDSNodeParams.model_validate(params)
    frames = [
        read_group_log(Path(config.for_seed(seed).loop.output_dir)).with_columns(
            pl.lit(seed, pl.Int64).alias("seed")
        )
        for seed in report["seeds"]
    ]
    return pl.concat(frames).select(GROUPS_SCHEMA.names())


#: The panels of the training plot: a title and the ``train/`` series drawn in it, a line a seed.
PANELS = {
    "groups a sampled batch": ["accepted_groups", "anchored_groups", "discarded_groups", "rounds"],
    "rejected, share of the batch's groups": [
        f"rejected_{r}" for r in ("all_right", "all_wrong", "too_easy", "too_hard")
    ],
    "the pool": ["pool_states", "saturated_states"],
    "reward and competence": ["mean_reward", "competence", "valid_rate"],
    "loss terms": ["loss", "surrogate", "anchor_nll", "replay_nll", "kl"],
    "policy": ["entropy", "clip_fraction", "approx_kl_old"],
}


def plot_salvage_ds_metrics(metrics: pl.DataFrame, report: dict[str, Any]):
    """A figure of each seed's run: the dev curve (step 0 is the SFT policy; a star marks the returned weights),
    the groups of each sampled batch (accepted, anchored, discarded, generation rounds), rejections by reason, the
    pool (active and saturated states), reward and competence, the loss terms and entropy/clipping."""
    select = report["params"]["loop"]["select_metric"] or "eval/dev/step_success_rate"
    panels = [("dev split: " + select.split("/")[-1], [select])]
    panels += [(title, [f"train/{n}" for n in names]) for title, names in PANELS.items()]
    fig, axes = figure_panels(len(panels), panel_size=(4.5, 3.5))
    styles = ["-", "--", ":", "-."]
    seeds = metrics["seed"].unique(maintain_order=True).to_list() if metrics.height else []
    for ax, (title, columns) in zip(axes, panels, strict=True):
        for column in columns:
            if column not in metrics.columns:
                continue
            colour = None
            for index, seed in enumerate(seeds):
                points = metrics.filter(pl.col("seed") == seed).select("step", column).drop_nulls()
                label = column.split("/")[-1] + (f", seed {seed}" if len(seeds) > 1 else "")
                (line,) = ax.plot(points["step"].to_list(), points[column].to_list(), styles[index % 4],
                                  color=colour, label=label, marker="." if column == select else None)  # fmt: skip
                colour = line.get_color()  # one colour a series, one line style a seed
                best = report.get("runs", {}).get(str(seed), {}).get("best_step")
                if column == select and best is not None:
                    value = points.filter(pl.col("step") == best)[column].to_list()
                    ax.plot([best], value, "*", color=colour, markersize=12)
        ax.set_title(title + ("" if metrics.height else " (no steps)"), fontsize=9)
        ax.set_xlabel("optimizer step")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def plot_state_competence(groups: pl.DataFrame, params: dict[str, Any]):
    """Competence per trained state over updates, one panel a seed: a row a state (sorted by its first draw's
    share right, then id), a column an update (the first of its batch's mu updates), the colour the share of the
    group's G samples that were right (blank: not drawn); a saturated state's row ends where it left the pool."""
    import numpy as np

    config = SalvageDSNodeParams.model_validate(params)
    mu, size = config.loop.updates_per_batch, config.algorithm.group_size
    seeds = groups["seed"].unique(maintain_order=True).to_list()
    fig, axes = figure_panels(max(1, len(seeds)), panel_size=(6.0, 4.5))
    for ax, seed in zip(axes, seeds or [None], strict=True):
        mine = groups.filter(pl.col("seed") == seed) if seed is not None else groups
        if mine.is_empty():
            ax.set_title("no sampled group")
            continue
        share = mine.group_by("state_id", "batch").agg(
            (pl.col("n_right").sum() / (pl.len() * size)).alias("share")
        )
        first = (
            share.sort("batch").group_by("state_id", maintain_order=True).first().sort(["share", "state_id"])
        )
        states = first["state_id"].to_list()
        batches = int(mine["batch"].max()) + 1
        grid = np.full((len(states), batches), np.nan)
        row = {state: i for i, state in enumerate(states)}
        for state, batch, value in share.iter_rows():
            grid[row[state], batch] = value
        image = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest",
                          extent=(0, batches * mu, len(states), 0))  # fmt: skip
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(f"trained states ({len(states)})")
        ax.set_title(
            f"share right of G = {size} per state" + (f", seed {seed}" if seed is not None else ""),
            fontsize=9,
        )
        fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    return fig
