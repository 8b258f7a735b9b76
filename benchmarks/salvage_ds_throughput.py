"""Salvage-DS training throughput against TRL's GRPOTrainer, same tiny model, prompts and group size, one run.

Both sides do the same work per optimizer step: sample G replies for each of B states (temperature 1, top-p 1,
top_k 0: TRL's default and our one sampler's), score them with the polarized action reward, one gradient step on the
clipped group-relative objective (mu = 1: TRL's ``num_iterations=1``). The gate is off (``mode: grpo``) for parity. Prints states/s and sampled actions/s of each and the ratio (target >= 1.0).

    .venv/bin/python benchmarks/salvage_ds_throughput.py --steps 6

The states are the toy shop states of tests/salvage_ds/conftest.py (the model is the tests' tiny Qwen3-VL).
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
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--states", type=int, default=4, help="states per optimizer step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rmsweb_kedro.actions import parse_action
    from rmsweb_kedro.agents.base import parse_sample
    from rmsweb_kedro.prompts import build_messages, render_prompt
    from rmsweb_kedro.training.loop import LoopConfig
    from rmsweb_kedro.training.salvage_ds import (
        SalvageDSParams,
        polarized_reward,
        train_salvage_ds,
    )
    from tests.salvage_ds.conftest import sft_tiny

    model, processor, states, prompt = sft_tiny.__wrapped__()
    tokenizer = processor.tokenizer
    p = SalvageDSParams(mode="grpo", group_size=args.group_size, max_new_tokens=args.max_new_tokens)
    work = tempfile.mkdtemp(prefix="salvage_ds_bench_")
    loop = LoopConfig(
        output_dir=f"{work}/ours", max_steps=args.steps, batch_size=args.states, learning_rate=1e-4,
        warmup_steps=0, min_learning_rate_ratio=1.0, weight_decay=0.0, eval_every=0, resume=False, progress=False,
    )  # fmt: skip
    torch.manual_seed(0)
    started = time.perf_counter()
    train_salvage_ds(copy.deepcopy(model), processor, states, p, loop, prompt)
    ours = time.perf_counter() - started

    rows = [
        {
            "prompt": render_prompt(build_messages(s, prompt, tokenizer)[0], processor),
            "reference": s["reference_action"],
        }
        for s in states
    ]

    def action_reward(prompts, completions, reference, **_):
        return [
            polarized_reward(parse_sample(c.strip())[1], [parse_action(r)], p)
            for c, r in zip(completions, reference, strict=True)
        ]  # fmt: skip

    config = GRPOConfig(
        output_dir=f"{work}/trl", max_steps=args.steps, per_device_train_batch_size=args.states * args.group_size,
        num_generations=args.group_size, max_completion_length=args.max_new_tokens, temperature=p.temperature,
        top_p=p.top_p, beta=0.0, epsilon=p.eps_low, epsilon_high=p.eps_high, learning_rate=1e-4, use_cpu=True,
        report_to="none", save_strategy="no", logging_steps=args.steps, bf16=False, seed=0,
        dataloader_num_workers=0, disable_tqdm=True,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=copy.deepcopy(model),
        reward_funcs=action_reward,
        args=config,
        train_dataset=Dataset.from_list(rows * args.steps),
        processing_class=tokenizer,
    )
    started = time.perf_counter()
    trainer.train()
    theirs = time.perf_counter() - started

    states_done = args.steps * args.states
    actions_done = states_done * args.group_size
    print(
        f"steps {args.steps}, {args.states} states x G={args.group_size} a step, {len(states)} distinct states"
    )
    print(f"salvage_ds (mode grpo): {states_done / ours:8.2f} states/s  {actions_done / ours:8.2f} actions/s")
    print(
        f"trl GRPOTrainer      : {states_done / theirs:8.2f} states/s  {actions_done / theirs:8.2f} actions/s"
    )
    print(f"ratio (ours / trl)   : {theirs / ours:.2f}  (target >= 1.0)")


if __name__ == "__main__":
    main()
