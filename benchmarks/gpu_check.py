"""The production path on one GPU, in minutes: a ~2B Qwen3-VL-Instruct, real screenshots, the project's own code.

    scripts/gpu_check.sh                                   # = .venv/bin/python benchmarks/gpu_check.py
    .venv/bin/python benchmarks/gpu_check.py --tiny        # smoke run on the CPU: toy sizes, the same code paths

A GPU machine without Chromium takes its screenshots from a folder made where a browser runs:

    .venv/bin/python benchmarks/gpu_check.py --screenshots shots --screenshots-only   # here: take and save them
    python benchmarks/gpu_check.py --screenshots shots                                 # there: read them

What it runs (about a minute on one H200 at either size; figures in docs/training.md, "Measured on one H200"):

1. a random Qwen3-VL at the 2B size (``--size 8b``: the 8B, LoRA only, as its full weights need several GPUs),
   built in the released layout (``modeling.released_layout_model``: vision tower with deepstack layers, the
   released image processor, chat template without generation markers, a 151,936-row vocabulary), bf16, on
   ``modeling.resolve_device()``;
2. real screenshots: the sandbox sites served locally and opened in headless Chromium at 1280x800 (about 1,000
   visual tokens each), turned into STATE rows with their accessibility tree;
3. SFT steps through ``training.sft.run_sft`` (assistant-only loss found by rendering, the screenshot in every
   sample, bf16, gradient checkpointing): full weights, then LoRA (r 16), each with padded, packed and
   budget-packed micro-batches (``sft.training.batching``; ``budget``: packed with ``loop.micro_batch_tokens`` =
   ``--sft-micro-batch-tokens``, the step's samples re-split by tokens; ``--sft-batching`` picks), and the ratios
   to padded;
4. Salvage-DS steps with G = 8 through ``training.salvage_ds.train_salvage_ds`` on the LoRA policy (sampling and
   the training forward both with the image; beta > 0, so pi_ref is the policy with its adapter disabled), with the
   ``hf`` sampler and, given ``--vllm-python``, the ``served`` one (vLLM on the same GPU, the adapter reloaded after
   every step), each step split into sampling, adapter reload and the rest (update);
5. generation throughput: greedy batched replies (``agents.hf_policy.sample_replies``).

It prints, per part, seconds a step, tokens/s, MFU and peak GPU memory. MFU = 6 N T / (seconds x peak FLOP/s) with N
the parameters and T the tokens a step (the usual 6NT convention: gradient checkpointing's recomputation and LoRA's
cheaper backward are not counted), peak from ``--peak-tflops`` (bf16 dense: 989 for H100/H200).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

#: sft.training.batching, and "budget": packed with loop.micro_batch_tokens (--sft-micro-batch-tokens)
SFT_BATCHINGS = ["padded", "packed", "budget"]
SIZES = {  # the text and vision towers of the released checkpoints (their config.json)
    "2b": {  # Qwen3-VL-2B-Instruct
        "vocab_size": 4096,
        "vocab_rows": 151_936,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": True,
        "vision_depth": 24,
        "vision_hidden_size": 1024,
        "vision_intermediate_size": 4096,
        "vision_heads": 16,
        "deepstack_visual_indexes": [5, 11, 17],
    },
    "8b": {  # Qwen3-VL-8B-Instruct
        "vocab_size": 4096,
        "vocab_rows": 151_936,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": False,
        "vision_depth": 27,
        "vision_hidden_size": 1152,
        "vision_intermediate_size": 4304,
        "vision_heads": 16,
        "deepstack_visual_indexes": [8, 16, 24],
    },
}


def screenshot_states(count: int, root: Path) -> list[dict]:
    """``count`` STATE rows from the first page of sandbox tasks: the 1280x800 screenshot, tree, URL, task."""
    from rmsweb_kedro.web.browser import BrowserConfig, BrowserEnv
    from rmsweb_kedro.web.sandbox import SandboxParams, SandboxServer, generate_tasks

    tasks = generate_tasks(SandboxParams())
    by_site = {task.site: task for task in tasks}  # one task a site first, then more
    chosen = (list(by_site.values()) + tasks)[:count]
    states = []
    with SandboxServer(port=0, seed=0) as server:
        with BrowserEnv(BrowserConfig(host_resolver_rules=server.host_resolver_rules)) as env:
            for index, task in enumerate(chosen):
                observation = env.reset(task, screenshot_dir=root / f"{index:03d}")
                if observation.error or not observation.screenshot:
                    raise SystemExit(f"{task.id}: no screenshot ({observation.error})")
                states.append(
                    {
                        "state_id": f"{task.id}:0",
                        "task_id": task.id,
                        "trajectory_id": f"{task.id}-check",
                        "step_index": 0,
                        "site": task.site,
                        "instruction": task.instruction,
                        "previous_actions": [],
                        "url": observation.url,
                        "axtree": observation.axtree,
                        "screenshot": str(observation.screenshot),
                        "reference_thought": "the first element starts the task",
                        "reference_action": "click(1)",
                    }
                )
    return states


def load_or_take_states(count: int, folder: Path) -> list[dict]:
    """The screenshot states saved in ``folder`` (its ``states.json``), else ``count`` taken now and saved there."""
    saved = folder / "states.json"
    if saved.exists():
        states = json.loads(saved.read_text())
        return [{**state, "screenshot": str(folder / state["screenshot"])} for state in states]
    states = screenshot_states(count, folder)
    relative = [
        {**state, "screenshot": str(Path(state["screenshot"]).relative_to(folder))} for state in states
    ]
    saved.write_text(json.dumps(relative, indent=1))
    return states


class Meter:
    """Peak memory and wall time of one part; CUDA is synchronised at both ends."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self.started
        self.peak_gib = torch.cuda.max_memory_allocated() / 2**30 if self.cuda else float("nan")


def report(name: str, meter: Meter, tokens_per_s: float, n_params: int, peak_tflops: float | None, extra=""):
    mfu = 6 * n_params * tokens_per_s / (peak_tflops * 1e12) if peak_tflops else float("nan")
    print(
        f"{name:<28} {meter.seconds:7.1f} s   {tokens_per_s:10,.0f} tokens/s   MFU {mfu:6.1%}   "
        f"peak {meter.peak_gib:6.1f} GiB   {extra}",
        flush=True,
    )


def steady_tokens_per_s(history: list[dict], warmup: int) -> float:
    """Median of the loop's per-step ``train/tokens_per_s`` after ``warmup`` steps (compilation, allocator)."""
    values = [row["train/tokens_per_s"] for row in history[warmup:] if "train/tokens_per_s" in row]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    import torch

    from rmsweb_kedro.agents.hf_policy import sample_replies
    from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages
    from rmsweb_kedro.models.modeling import LoraSettings, add_lora, released_layout_model, resolve_device
    from rmsweb_kedro.models.serving import ServerConfig
    from rmsweb_kedro.training.loop import LoopConfig
    from rmsweb_kedro.training.salvage_ds import SalvageDSParams, train_salvage_ds
    from rmsweb_kedro.training.sampling import SamplerConfig
    from rmsweb_kedro.training.sft import SFTConfig, run_sft

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="toy sizes on the CPU: a smoke run of every part")
    parser.add_argument("--size", choices=sorted(SIZES), default="2b", help="the released checkpoint's shape")
    parser.add_argument("--sft-steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4, help="SFT samples a step")
    parser.add_argument(
        "--sft-batching",
        nargs="+",
        choices=SFT_BATCHINGS,
        default=SFT_BATCHINGS,
        help="SFT batchings to run, each for --sft-steps steps (sft.training.batching; budget: packed to "
        "--sft-micro-batch-tokens)",
    )
    parser.add_argument(
        "--sft-micro-batch-tokens",
        type=int,
        default=8192,
        help="loop.micro_batch_tokens of the budget batching (4 samples of ~2.5k tokens: 2 micro-batches)",
    )
    parser.add_argument("--rl-steps", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=8, help="G")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's bf16 dense peak")
    parser.add_argument(
        "--screenshots",
        type=Path,
        help="a folder of screenshot states: read when it holds states.json, else taken with Chromium and saved there",
    )
    parser.add_argument(
        "--screenshots-only", action="store_true", help="take and save --screenshots, then stop"
    )
    parser.add_argument(
        "--vllm-python", help="also Salvage-DS with sampler served: the Python of a venv with vLLM (on the CPU: "
        "`bash scripts/vllm_env.sh` prints it; needs head_dim >= 32, not --tiny's)",
    )  # fmt: skip
    parser.add_argument("--vllm-devices", default=None, help="CUDA_VISIBLE_DEVICES of the vLLM server")
    parser.add_argument(
        "--vllm-arg", action="append", default=[], help="a vLLM flag, repeatable: --vllm-arg=--gpu-memory-utilization "
        "--vllm-arg=0.35 (the trainer shares the GPU)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.screenshots_only:
        if args.screenshots is None:
            raise SystemExit("--screenshots-only needs --screenshots FOLDER")
        print(f"{len(load_or_take_states(16, args.screenshots))} screenshot states in {args.screenshots}")
        return

    device = resolve_device("cpu" if args.tiny else "auto")
    if not args.tiny and device.type != "cuda":
        raise SystemExit("no CUDA device: run with --tiny for a smoke run on the CPU")
    peak = None if args.tiny else args.peak_tflops
    steps = (2, 2) if args.tiny else (args.sft_steps, args.rl_steps)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    prompt = PromptConfig(observation=["screenshot", "axtree"], axtree_max_tokens=1024)

    states = load_or_take_states(16, args.screenshots or work / "screenshots")
    corpus = [
        part["text"]
        for state in states
        for message in build_messages(state, prompt, with_reference=True)[0]
        for part in message["content"]
        if part["type"] == "text"
    ]
    with Meter(device) as meter:
        model, processor = released_layout_model(
            corpus, {} if args.tiny else SIZES[args.size], device=str(device)
        )
        model = model.to(torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    visual = sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")
    print(f"Qwen3-VL (released layout, random, bf16): {n_params / 1e9:.2f}B parameters ({visual / 1e9:.2f}B vision), "
          f"built in {meter.seconds:.0f} s on {device}; {len(states)} screenshots of 1280x800")  # fmt: skip

    def loop(name: str, max_steps: int, batch_size: int, lr: float) -> LoopConfig:
        return LoopConfig(
            output_dir=str(work / name),
            max_steps=max_steps,
            batch_size=batch_size,
            learning_rate=lr,
            warmup_steps=0,
            eval_every=0,
            save_checkpoints=False,  # an 8B training state is tens of GB: the figures are about steps
            resume=False,
            log_every=1,
            gradient_checkpointing=True,
            progress=False,
        )

    warmup = 1 if steps[0] > 1 else 0
    # 8B full weights with AdamW hold ~140 GB (docs/training.md): FSDP over several GPUs, not this check
    full = [] if args.size == "8b" and not args.tiny else [("SFT, full weights", None)]
    for name, lora in full + [("SFT, LoRA r=16", LoraSettings(r=16))]:
        if lora is not None:
            model = add_lora(model, lora)
        speeds = {}
        for batching in args.sft_batching:  # the same steps padded, packed, packed to a budget
            budget = args.sft_micro_batch_tokens if batching == "budget" else None
            config = SFTConfig(
                prompt=prompt,
                loss_on="assistant",
                batching="packed" if budget else batching,
                loop=loop(f"{name} {batching}", steps[0], args.batch_size, 1e-5).model_copy(
                    update={"micro_batch_tokens": budget}
                ),
            )
            with Meter(device) as meter:
                result = run_sft(model, processor, states, [], config)
            model = result.model
            speeds[batching] = tokens = steady_tokens_per_s(result.history, warmup)
            loss = result.history[-1]["train/loss"]
            note = f"{steps[0]} steps, loss {loss:.3f}"
            if budget:
                note += f", {result.history[-1]['train/micro_batches']:.0f} micro-batches a step"
            report(f"{name}, {batching}", meter, tokens, n_params, peak, note)
        for other in ("packed", "budget"):
            if other in speeds and "padded" in speeds:
                print(f"{name}: {other} / padded tokens/s {speeds[other] / speeds['padded']:.2f}", flush=True)

    algorithm = SalvageDSParams(
        group_size=args.group_size, max_new_tokens=32, beta=0.04, c_low=0.0, c_high=1.0
    )
    samplers = [("hf", SamplerConfig())]
    if args.vllm_python:  # vLLM beside the trainer on the same GPU, the adapter reloaded after every step
        server = ServerConfig(
            python=args.vllm_python, dtype="float32" if args.tiny else "bfloat16", max_model_len=4096,
            max_lora_rank=16, devices=args.vllm_devices, extra_args=args.vllm_arg,
            env={"VLLM_CPU_KVCACHE_SPACE": "1"} if args.tiny else {},
        )  # fmt: skip
        samplers.append(("served", SamplerConfig(kind="served", server=server)))
    for kind, sampler in samplers:  # one after the other on the same policy (lr 1e-6: timing, not learning)
        with Meter(device) as meter:
            result = train_salvage_ds(
                model, processor, states, algorithm, loop(f"salvage_ds_{kind}", steps[1], 2, 1e-6), prompt,
                sampler=sampler,
            )  # fmt: skip
        model, row = result.model, result.history[-1]
        sampled = sum(r["train/sampled_actions"] for r in result.history)
        split = {
            k: sum(r[f"train/{k}_seconds"] for r in result.history) / steps[1] for k in ("sampling", "reload")
        }
        update = meter.seconds / steps[1] - split["sampling"] - split["reload"]
        report(
            f"Salvage-DS, G={args.group_size}, LoRA, sampler {kind}",
            meter,
            float("nan"),  # its batches are token lists, not attention masks: the loop counts no tokens/s
            n_params,
            peak,
            f"{meter.seconds / steps[1]:.1f} s/step (sampling {split['sampling']:.2f}, adapter reload "
            f"{split['reload']:.2f}, update and the rest {update:.2f}; served: the server's start included), "
            f"{sampled:.0f} sampled replies, loss {row['train/loss']:.3f}",
        )

    model = result.model.eval()
    with Meter(device) as meter, torch.no_grad():
        groups = sample_replies(model, processor, states[:8], prompt, 1, greedy=True, max_new_tokens=64)
    generated = sum(len(group[0].completion_ids) for group in groups)
    report(
        "generation, 8 prompts", meter, generated / meter.seconds, 0, None, f"{generated} tokens generated"
    )
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
