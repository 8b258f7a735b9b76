"""Salvage-DS training throughput with each sampler (``hf``, ``served``) against TRL's GRPOTrainer, same tiny LoRA
policy, prompts and group size, one run.

Every side does the same work per optimizer step: sample G replies for each of B states (temperature 1, top-p 1,
top_k 0: TRL's default and our samplers'), score them with the polarized action reward, one gradient step on the
clipped group-relative objective (mu = 1: TRL's ``num_iterations=1``). The gate is off (``mode: grpo``) for parity.
``served`` samples on vLLM's CPU build (``scripts/vllm_env.sh``) serving the base, the adapter reloaded after every
step; its server's start is timed apart, not in states/s. Prints states/s and sampled actions/s of each, the ratios
(ours / TRL) and our step time split into sampling, adapter reload and update (the rest).

    .venv/bin/python benchmarks/salvage_ds_throughput.py --steps 6          # --no-served: hf and TRL only

The states are the toy shop states of tests/salvage_ds/conftest.py; the policy is its ``lora_tiny`` (a tiny
Qwen3-VL with head_dim 32, the smallest vLLM's CPU attention takes, with a rank-8 LoRA adapter).
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
    parser.add_argument("--no-served", dest="served", action="store_false", help="skip the vLLM sampler")
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rmsweb_kedro.agents.base import parse_sample
    from rmsweb_kedro.contracts.actions import parse_action, polarized_reward
    from rmsweb_kedro.contracts.prompts import build_messages, render_prompt
    from rmsweb_kedro.models.serving import ServerConfig, VLLMServer
    from rmsweb_kedro.training.loop import LoopConfig
    from rmsweb_kedro.training.salvage_ds import SalvageDSParams, train_salvage_ds
    from rmsweb_kedro.training.sampling import SamplerConfig
    from tests.salvage_ds.conftest import lora_tiny

    model, processor, states, prompt = lora_tiny()
    tokenizer = processor.tokenizer
    p = SalvageDSParams(mode="grpo", group_size=args.group_size, max_new_tokens=args.max_new_tokens)
    work = tempfile.mkdtemp(prefix="salvage_ds_bench_")
    loop = LoopConfig(
        output_dir=f"{work}/ours", max_steps=args.steps, batch_size=args.states, learning_rate=1e-4,
        warmup_steps=0, min_learning_rate_ratio=1.0, weight_decay=0.0, eval_every=0, resume=False, progress=False,
    )  # fmt: skip

    def ours(name: str, sampler: SamplerConfig) -> tuple[float, dict[str, float]]:
        """Seconds of a run with ``sampler`` and its split: sampling, reload, update (the rest)."""
        torch.manual_seed(0)
        started = time.perf_counter()
        result = train_salvage_ds(
            copy.deepcopy(model), processor, states, p, loop.model_copy(update={"output_dir": f"{work}/{name}"}),
            prompt, sampler=sampler,
        )  # fmt: skip
        total = time.perf_counter() - started
        split = {
            k: sum(row.get(f"train/{k}_seconds", 0.0) for row in result.history)
            for k in ("sampling", "reload")
        }
        return total, split | {"update": total - split["sampling"] - split["reload"]}

    runs = {"hf": ours("hf", SamplerConfig())}
    if args.served:
        import subprocess

        from rmsweb_kedro.models.modeling import save_checkpoint

        python = subprocess.run(
            ["bash", "scripts/vllm_env.sh", "--path"], capture_output=True, text=True, check=True
        ).stdout.split()[-1]
        save_checkpoint(model, processor, f"{work}/base")
        server_config = ServerConfig(
            python=python, dtype="float32", max_model_len=1024, max_lora_rank=8,
            env={"VLLM_CPU_KVCACHE_SPACE": "1"}, extra_args=["--no-enable-chunked-prefill"],
        )  # fmt: skip
        started = time.perf_counter()
        with VLLMServer(server_config, f"{work}/base", f"{work}/vllm_server.log").start() as server:
            startup = time.perf_counter() - started
            attached = ServerConfig(base_url=server.base_url, api_key=server.api_key)  # its fresh key
            runs["served"] = ours("served", SamplerConfig(kind="served", server=attached))

    rows = [
        {
            "prompt": render_prompt(build_messages(s, prompt, tokenizer)[0], processor),
            "reference": s["reference_action"],
        }
        for s in states
    ]

    def action_reward(prompts, completions, reference, **_):
        return [
            polarized_reward(parse_sample(c.strip())[1], [parse_action(r)], p.r_pos, p.r_neg, p.r_invalid)
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
        f"steps {args.steps}, {args.states} states x G={args.group_size} a step, {len(states)} distinct states, "
        f"LoRA r=8, {args.max_new_tokens} new tokens at most"
    )
    for name, (seconds, split) in runs.items():
        print(
            f"salvage_ds, sampler {name:6s}: {states_done / seconds:7.2f} states/s  {actions_done / seconds:7.2f} "
            f"actions/s  ratio to TRL {theirs / seconds:.2f}   split: sampling {split['sampling']:.1f} s, "
            f"adapter reload {split['reload']:.1f} s, update {split['update']:.1f} s"
        )
    print(
        f"trl GRPOTrainer          : {states_done / theirs:7.2f} states/s  {actions_done / theirs:7.2f} actions/s"
    )
    if "served" in runs:
        print(f"vLLM server start (not counted above): {startup:.1f} s")


if __name__ == "__main__":
    main()
