"""Choosing mu (``loop.updates_per_batch``): Salvage-DS with mu = 1, 2, 4 at the same sampling cost.

Every run samples the same number of batches (``--batches``, B states x G replies each; the sampled-action budget
is equal), so mu only changes how many optimizer steps are taken on each sampled batch. Printed per mu: competence
(share of 16 sampled replies right) and greedy accuracy on the states before and after, the mean clip fraction and
approx KL to pi_old over the run, and the wall time. At mu = 1 the ratio is 1 at every update (nothing clips);
the clip only acts from the second update on a batch.

    .venv/bin/python benchmarks/salvage_ds_mu.py --batches 6 --seeds 0 1

The states are the toy shop states of tests/salvage_ds/conftest.py (the model is the tests' tiny Qwen3-VL,
fine-tuned briefly): a few CPU minutes for the default arguments.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=6, help="sampled batches per run (equal budget)")
    parser.add_argument("--mus", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    args = parser.parse_args()

    import torch

    from rmsweb_kedro.training.loop import LoopConfig
    from rmsweb_kedro.training.salvage_ds import (
        SalvageDSParams,
        evaluate_competence,
        prepare_states,
        train_salvage_ds,
    )
    from tests.salvage_ds.conftest import sft_tiny

    model, processor, states, prompt = sft_tiny.__wrapped__()
    prepared = prepare_states(states, processor, prompt)
    p = SalvageDSParams(mode="salvage_ds", max_new_tokens=10, lam=1.0, competence="group")
    torch.manual_seed(123)
    before, _ = evaluate_competence(model, prepared, p, processor, prompt, n=16)
    print(
        f"before: competence {before['competence']:.3f}, greedy step success {before['step_success_rate']:.3f}"
    )
    print("mu  seed  competence  greedy  clip_fraction  approx_kl_old  seconds")
    work = tempfile.mkdtemp(prefix="salvage_ds_mu_")
    for mu in args.mus:
        for seed in args.seeds:
            loop = LoopConfig(
                output_dir=f"{work}/mu{mu}_s{seed}", max_steps=args.batches * mu, batch_size=4,
                updates_per_batch=mu, learning_rate=args.learning_rate, warmup_steps=0,
                min_learning_rate_ratio=1.0, weight_decay=0.0, eval_every=0, resume=False, progress=False,
                save_checkpoints=False, seed=seed,
            )  # fmt: skip
            started = time.perf_counter()
            result = train_salvage_ds(copy.deepcopy(model), processor, states, p, loop, prompt)
            seconds = time.perf_counter() - started
            torch.manual_seed(123)  # common random numbers: the same draws as "before"
            after, _ = evaluate_competence(result.model, prepared, p, processor, prompt, n=16)
            clip = sum(r["train/clip_fraction"] for r in result.history) / len(result.history)
            kl = sum(r["train/approx_kl_old"] for r in result.history) / len(result.history)
            print(
                f"{mu:>2}  {seed:>4}  {after['competence']:>10.3f}  {after['step_success_rate']:>6.3f}"
                f"  {clip:>13.3f}  {kl:>13.4f}  {seconds:>7.1f}"
            )


if __name__ == "__main__":
    main()
