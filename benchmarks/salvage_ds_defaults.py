"""Choosing Salvage-DS's defaults on the dev split alone: each variant of ``params:salvage_ds`` (one change to the
configured defaults at a time) trains from the default run's SFT checkpoint on its critical states, for the same
training seeds, and is scored on ``sft_states_dev`` only, the split no other stage trains or evaluates on.

Printed per variant: dev step success of the SFT policy (step 0), of the weights the run returns (the best dev
evaluation: what the stage would hand on) and of the last update (what it would hand on without the choice), as
the mean over seeds and each seed's, how often the run returned the SFT policy itself, the mean rounds and
accepted / anchored groups a batch, and the wall time. The defaults in conf/base/parameters_salvage_ds.yml were
chosen from this table (docs/salvage_ds.md, "Choosing the defaults"); the split evaluate reports is never read.

    bash scripts/run.sh                                   # the default run first: its SFT model, states, dev split
    .venv/bin/python benchmarks/salvage_ds_defaults.py --seeds 0 1 2
    .venv/bin/python benchmarks/salvage_ds_defaults.py --variants default lr_3e-4 --seeds 0

About a minute a variant and seed on the 2-core CPU machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The catalog entry every variant is scored on (tests/salvage_ds/test_pipeline.py checks it is the dev split).
SELECTED_ON = "sft_states_dev"

#: Each variant: one change to params:salvage_ds (dotted keys), from the configured defaults.
VARIANTS: dict[str, dict[str, object]] = {
    "default": {},
    "lr_3e-4": {"loop.learning_rate": 3e-4},
    "lr_3e-5": {"loop.learning_rate": 3e-5},
    "mu_1": {"loop.updates_per_batch": 1, "loop.max_steps": 36},
    "anchor_all": {"algorithm.anchor": "all"},
    "no_anchor": {"algorithm.mode": "salvage_ds_no_anchor"},
    "beta_0.05": {"algorithm.beta": 0.05},
    "replay_0.5": {"algorithm.eta": 0.5},
    "no_saturation": {"algorithm.saturation_draws": None},
}


def with_changes(params: dict, changes: dict[str, object]) -> dict:
    """A deep copy of ``params`` with each dotted key of ``changes`` set."""
    import copy

    out = copy.deepcopy(params)
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        node = out
        for key in path:
            node = node[key]
        node[last] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()

    import polars as pl
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    from rmsweb_kedro.pipelines.salvage_ds.nodes import train_rmsweb_models

    bootstrap_project(ROOT)
    with KedroSession.create(project_path=ROOT) as session:
        context = session.load_context()
        catalog = context.catalog
        params = context.params["salvage_ds"]
        sft = catalog.load("sft_model")
        critical, dev, replay = (
            catalog.load(n) for n in ("critical_states", SELECTED_ON, "sft_states_train")
        )
    print(f"{critical.height} critical states, {dev.height} dev states ({SELECTED_ON}); seeds {args.seeds}")
    header = f"{'variant':<14} {'dev SFT':>8} {'returned':>9} {'last':>7} {'SFT kept':>9} {'rounds':>7} {'acc':>5} {'anc':>5} {'s':>6}  per seed (returned/last)"
    print(header)
    rows = []
    for name in args.variants:
        run_params = with_changes(params, VARIANTS[name]) | {"seeds": args.seeds}
        with tempfile.TemporaryDirectory() as work:
            run_params["loop"] = run_params["loop"] | {"output_dir": work, "progress": False}
            started = time.perf_counter()
            _, history, report = train_rmsweb_models(sft, critical, dev, replay, run_params)
            seconds = time.perf_counter() - started
        metric = report["params"]["loop"]["select_metric"]
        per_seed = []
        for seed in args.seeds:
            run = report["runs"][str(seed)]
            scored = history.filter(pl.col("seed") == seed).select(metric).drop_nulls()[metric]
            per_seed.append((run["best_dev"], scored[-1], run["best_step"] == 0, run["means"]))
        mean = lambda values: sum(values) / len(values)  # noqa: E731
        row = {
            "variant": name,
            "dev_sft": report["before"]["dev"]["step_success_rate"],
            "returned": mean([s[0] for s in per_seed]),
            "last": mean([s[1] for s in per_seed]),
            "sft_kept": sum(s[2] for s in per_seed),
            "rounds": mean([s[3].get("rounds") or 0.0 for s in per_seed]),
            "accepted": mean([s[3].get("accepted_groups") or 0.0 for s in per_seed]),
            "anchored": mean([s[3].get("anchored_groups") or 0.0 for s in per_seed]),
            "seconds": seconds,
        }
        rows.append(row)
        seeds = " ".join(f"{100 * b:.1f}/{100 * last:.1f}" for b, last, _, _ in per_seed)
        print(
            f"{name:<14} {100 * row['dev_sft']:>8.1f} {100 * row['returned']:>9.1f} {100 * row['last']:>7.1f} "
            f"{row['sft_kept']:>4}/{len(args.seeds):<4} {row['rounds']:>7.2f} {row['accepted']:>5.2f} "
            f"{row['anchored']:>5.2f} {seconds:>6.0f}  {seeds}",
            flush=True,
        )
    best = max(rows, key=lambda r: (r["returned"], r["last"]))
    print(f"highest mean returned dev step success: {best['variant']} ({100 * best['returned']:.1f} %)")


if __name__ == "__main__":
    main()
