"""SFT online success against training minutes: how long the policy must train before it finishes sandbox tasks.

Trains the project's SFT (the same loop, data and parameters as ``kedro run --pipelines sft``) in segments that end
at the given training minutes; after each, the policy is scored offline on the val states and online in the browser
on the evaluation's sandbox tasks (``params:evaluate``: every training-site task of its splits, val and test by
default, and the held-out ones it names). Each segment resumes the previous one from its checkpoint
(``loop.resume``), so the points lie on one training run whose learning-rate schedule spans ``--max-steps``. Offline
and online scoring are the evaluate stage's own (``evaluation.predict_offline``/``offline_metrics``,
``evaluation.run_online``). Prints one row a point and writes a plot and a CSV.

    kedro run --pipelines tasks,collect,trajectories,sft_data,sft   # the data and the base model
    .venv/bin/python benchmarks/sft_online_vs_minutes.py --minutes 4 8 12 16 --max-steps 3200

Run it from the project root on an otherwise idle machine: a point's minutes are wall-clock training time.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, nargs="+", default=[4, 8, 12, 16], help="training minutes")
    parser.add_argument("--max-steps", type=int, default=3200, help="the learning-rate schedule's length")
    parser.add_argument("--env", default=None, help="Kedro configuration environment (default: base + local)")
    parser.add_argument(
        "--out", default="data/08_reporting/sft/sft_online_vs_minutes", help="CSV and PNG stem"
    )
    args = parser.parse_args()

    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    from rmsweb_kedro.measures.evaluation import (
        EvaluateParams,
        offline_metrics,
        predict_offline,
        run_online,
        success_summary,
    )
    from rmsweb_kedro.measures.reporting import figure_panels
    from rmsweb_kedro.models.modeling import LoadedModel
    from rmsweb_kedro.training.sft import SFTConfig, run_sft

    root = Path.cwd()
    bootstrap_project(root)
    with KedroSession.create(project_path=root, env=args.env) as session:
        context = session.load_context()
        params, catalog = context.params, context.catalog
        train = catalog.load("sft_states_train_augmented").to_dicts()
        val_states = catalog.load("sft_states_val")
        tasks = catalog.load("sandbox_tasks")
        model, processor = catalog.load("base_model")
    config = SFTConfig.model_validate(params["sft"]["training"])
    evaluate = EvaluateParams.model_validate(params["evaluate"])
    work = tempfile.mkdtemp(prefix="sft_minutes_")
    val = val_states.to_dicts()
    print(f"{len(train)} training states, {len(val)} val states; checkpoints in {work}")
    print("minutes  steps  val_step_success  argument_match  online  success_low  success_high  online_s")
    rows, trained_s = [], 0.0
    for mark in sorted(args.minutes):
        loop = config.loop.model_copy(
            update={"output_dir": work, "max_steps": args.max_steps, "max_seconds": 60 * mark - trained_s,
                    "resume": bool(rows), "eval_every": 0, "save_every": args.max_steps}
        )  # fmt: skip
        started = time.monotonic()
        result = run_sft(model, processor, train, val, config.model_copy(update={"loop": loop}))
        trained_s += time.monotonic() - started
        model = result.model
        trained = LoadedModel(model, processor)
        offline = offline_metrics(predict_offline(val_states, trained, evaluate, "sft")).row(0, named=True)
        started = time.monotonic()
        episodes = run_online(tasks, trained, evaluate, "sft", params.get("rollouts"))
        online = success_summary(episodes, evaluate.confidence)
        judged = episodes.filter(episodes["success"].is_not_null())
        row = {
            "minutes": round(trained_s / 60, 2), "steps": result.step,
            "val_step_success": offline["step_success_rate"], "argument_match": offline["argument_match"],
            "successes": int(judged["success"].sum()), "episodes": judged.height,
            "success_low": online["success_low"], "success_high": online["success_high"],
            "online_s": round(time.monotonic() - started),
        }  # fmt: skip
        rows.append(row)
        print(
            f"{row['minutes']:>7.1f}  {row['steps']:>5}  {row['val_step_success']:>16.3f}  "
            f"{row['argument_match']:>14.3f}  {row['successes']:>3}/{row['episodes']:<3} "
            f"{row['success_low']:>11.3f}  {row['success_high']:>12.3f}  {row['online_s']:>8}",
            flush=True,
        )
        if result.step >= args.max_steps:
            break
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.with_suffix(".csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    figure, (axis,) = figure_panels()
    minutes = [r["minutes"] for r in rows]
    rate = [100 * r["successes"] / r["episodes"] for r in rows]
    axis.errorbar(
        minutes, rate, fmt="o-", capsize=3, label=f"online success, {rows[0]['episodes']} episodes (95 % Wilson)",
        yerr=[[v - 100 * r["success_low"] for v, r in zip(rate, rows, strict=True)],
              [100 * r["success_high"] - v for v, r in zip(rate, rows, strict=True)]],
    )  # fmt: skip
    axis.plot(minutes, [100 * r["val_step_success"] for r in rows], "s--", label="offline val step success")
    axis.set_xlim(left=0)
    axis.set_ylim(bottom=0)
    axis.set_xlabel("SFT training minutes (wall clock)")
    axis.set_ylabel("%")
    axis.set_title("SFT: online success against training time")
    axis.legend()
    figure.tight_layout()
    figure.savefig(out.with_suffix(".png"), dpi=120)
    print(f"wrote {out.with_suffix('.csv')} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
