"""SFT training throughput: our Accelerate loop against TRL's SFTTrainer, same tiny model, samples, batch size.

    .venv/bin/python benchmarks/sft_throughput.py [--steps 30] [--batch-size 16] [--warmup 5]

Each trainer runs in its own child process (so peak memory is its own: CPU max RSS, or CUDA peak allocated on a
GPU), on the same saved tiny checkpoint and the same states, assistant-only loss, bf16 autocast, AdamW, one process.
Tokens/s counts the real (non-padding) tokens of the samples each trainer consumed after ``--warmup`` steps,
over the time of those steps. Prints both figures and the ratio ours / TRL (target >= 1.0). The machine's CPU may
be shared: compare figures from the same run only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _states(n: int) -> list[dict]:
    from tests.fixtures_model import make_states

    return make_states(n_tasks=max(1, n // 3))[:n]


def _peak_memory_mb() -> float:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _tokens_per_sample(processor, states, prompt) -> list[int]:
    from rmsweb_kedro.training.sft import SFTCollator

    collate = SFTCollator(processor, prompt, "assistant")
    return [int(collate([s])["attention_mask"].sum()) for s in states]


def run_ours(checkpoint: str, args) -> dict:
    from rmsweb_kedro.modeling import load_model
    from rmsweb_kedro.training.loop import train_loop
    from rmsweb_kedro.training.sft import SFTCollator, SFTConfig, sft_loss

    model, processor = load_model({"path": checkpoint})
    states = _states(args.samples)
    config = SFTConfig(
        loop={
            "output_dir": tempfile.mkdtemp(),
            "max_steps": args.steps,
            "batch_size": args.batch_size,
            "mixed_precision": "bf16",
            "eval_every": 0,
            "log_every": 1,
            "progress": False,
            "resume": False,
            "save_every": 0,
            "warmup_steps": 2,
        },
        loss_on="assistant",
    )
    collate = SFTCollator(processor, config.prompt, config.loss_on)
    marks: list[float] = []

    def timed_loss(model, batch):  # called once at the start of each step (no accumulation)
        marks.append(time.perf_counter())
        return sft_loss(model, batch)

    result = train_loop(model, states, collate, timed_loss, config.loop)
    marks.append(time.perf_counter())
    return _figures(processor, states, args, marks[args.warmup :], result.history[-1]["train/loss"])


def _figures(processor, states, args, marks: list[float], final_loss) -> dict:
    """Tokens/s over the timed steps (mean real tokens a sample x batch x steps / seconds) and peak memory."""
    from rmsweb_kedro.prompts import PromptConfig

    tokens = _tokens_per_sample(processor, states, PromptConfig())
    mean_tokens = sum(tokens) / len(tokens)
    seconds = marks[-1] - marks[0]
    return {
        "tokens_per_s": mean_tokens * args.batch_size * (len(marks) - 1) / seconds,
        "peak_memory_mb": _peak_memory_mb(),
        "final_loss": final_loss,
        "timed_steps": len(marks) - 1,
    }


def run_trl(checkpoint: str, args) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig as TRLConfig
    from trl import SFTTrainer

    from rmsweb_kedro.modeling import load_model
    from rmsweb_kedro.prompts import PromptConfig, build_messages

    model, processor = load_model({"path": checkpoint})
    prompt = PromptConfig()
    states = _states(args.samples)
    # Same conversations as ours, as plain-text messages (text-only prompts: the image parts are absent).
    rows = [
        {
            "messages": [
                {"role": m["role"], "content": m["content"][0]["text"]} for m in build_messages(s, prompt)[0]
            ]
            + [
                {
                    "role": "assistant",
                    "content": build_messages(s, prompt, with_reference=True)[0][-1]["content"][0]["text"],
                }
            ]
        }
        for s in states
    ]

    class Clock(TrainerCallback):
        def __init__(self):
            self.marks: list[float] = []

        def on_step_end(self, *_, **__):
            self.marks.append(time.perf_counter())

    clock = Clock()
    config = TRLConfig(
        output_dir=tempfile.mkdtemp(),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=3e-3,
        lr_scheduler_type="cosine",
        warmup_steps=2,
        weight_decay=0.1,
        adam_beta2=0.95,
        max_grad_norm=1.0,
        bf16=True,
        logging_steps=10_000,
        save_strategy="no",
        report_to=[],
        seed=0,
        assistant_only_loss=True,
        max_length=None,
        packing=False,
        dataloader_num_workers=0,
        use_cpu=not __import__("torch").cuda.is_available(),
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=processor.tokenizer,
        callbacks=[clock],
    )
    clock.marks.append(time.perf_counter())  # the first step's start
    trainer.train()
    # TRL shuffles with its own sampler; the batches hold the same samples on average: mean tokens a sample.
    return _figures(
        processor, states, args, clock.marks[args.warmup :], trainer.state.log_history[-1].get("train_loss")
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--samples", type=int, default=240)
    parser.add_argument("--child", choices=["ours", "trl"])
    parser.add_argument("--checkpoint")
    args = parser.parse_args()
    if args.child:
        figures = (run_ours if args.child == "ours" else run_trl)(args.checkpoint, args)
        print("RESULT " + json.dumps(figures))
        return

    from rmsweb_kedro.modeling import build_tiny_model, save_checkpoint

    work = Path(tempfile.mkdtemp(prefix="sft-bench-"))
    states = _states(args.samples)
    model, processor = build_tiny_model(
        [s["axtree"] + "\n" + s["instruction"] for s in states], {"vocab_size": 512}
    )
    save_checkpoint(model, processor, work / "tiny")
    results = {}
    for name in ("ours", "trl"):
        command = [
            sys.executable,
            __file__,
            "--child",
            name,
            "--checkpoint",
            str(work / "tiny"),
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
            "--batch-size",
            str(args.batch_size),
            "--samples",
            str(args.samples),
        ]
        done = subprocess.run(
            command, capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        )
        line = next((out for out in done.stdout.splitlines() if out.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"{name} failed:\n{done.stderr[-4000:]}")
        results[name] = json.loads(line[len("RESULT ") :])
        print(
            f"{name:5s} tokens/s {results[name]['tokens_per_s']:9.0f}   peak memory {results[name]['peak_memory_mb']:8.0f} MiB"
        )
    ratio = results["ours"]["tokens_per_s"] / results["trl"]["tokens_per_s"]
    print(
        f"ratio ours/TRL tokens/s: {ratio:.2f} (target >= 1.0); steps {args.steps}, batch {args.batch_size}"
    )


if __name__ == "__main__":
    main()
