"""SFT training throughput: our loop with padded batches, packed batches (``sft.training.batching``) and packed to
a token budget (``budget``: ``loop.micro_batch_tokens``) against TRL's SFTTrainer in its padding-free setting, same
tiny model, samples, batch size; each in fp32 and under bf16 autocast (``loop.mixed_precision``), on the CPU kernels
the project pins (``portable``) or torch's own (``native``: models/numerics.py).

    .venv/bin/python benchmarks/sft_throughput.py [--steps 30] [--batch-size 16] [--warmup 5] \
        [--micro-batch-tokens 2048] [--states data/05_model_input/sft/sft_states_train_augmented.parquet] \
        [--precisions fp32 bf16] [--kernels portable native] [--trainers padded packed budget trl]

The data: ``--states``, the STATE rows of a default run's SFT (its augmented training states), or else the test
fixtures' states (``tests.fixtures_model.make_states``, whose rows are all about the same length); the prompt is the
default run's (``conf/base/globals.yml`` ``policy_prompt``) and the model the embedded default's shape
(``conf/base/parameters_sft.yml`` ``sft.tiny``, its tokenizer trained on the states).

Each trainer, precision and kernel setting runs in its own child process (so peak memory is its own: CPU max RSS,
or CUDA peak allocated on a GPU, and the kernel pins are read at its start), on the same saved tiny checkpoint and
the same states, assistant-only loss, AdamW, one process. The first lines print the CPU and its instruction sets as
the run manifest records them: bf16 autocast is fast only where the CPU has bf16 instructions (``avx512_bf16``,
``amx_bf16``); elsewhere it is emulated (docs/training.md, "Numerics on the CPU").
Tokens/s counts the real (non-padding) tokens of the samples each trainer consumed after ``--warmup`` steps,
over the time of those steps, by the wall clock and by this process's CPU time (on a shared machine the CPU time is
the steadier figure: other load stretches the wall clock, not the work). The padding fraction is the share of the tokens a forward computes that are padding,
over the trained micro-batches. ``budget`` trains each step's same samples re-split into micro-batches of at most
``--micro-batch-tokens`` real tokens (first-fit decreasing, gradients accumulated); its figures include measuring
each sample's tokens once (the loop's ``sample_tokens``; a full run pays it once a sample, not once an epoch), and
it prints the mean micro-batches a step and how full they are. TRL runs with ``padding_free=True`` (its batches flattened into one row with
restarting ``position_ids``, the setting its docs recommend over ``packing`` for SFT on whole samples; on the CPU it
attends through transformers' dense block-diagonal mask, as it has no FlashAttention there). Prints the figures and
the ratios packed / padded and budget / padded (target >= 1.3), against TRL, and fp32 / bf16. The machine's CPU may
be shared: compare figures from the same run only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINERS = ("padded", "packed", "budget", "trl")  # budget: packed to --micro-batch-tokens; trl: padding_free
PRECISIONS = {"fp32": "no", "bf16": "bf16"}  # the name printed -> loop.mixed_precision
KERNELS = ("portable", "native")  # models/numerics.py: the project's pinned AVX2 kernels, or torch's own
sys.path.insert(0, str(ROOT))


def _states(args) -> list[dict]:
    if args.states:
        import polars as pl

        return pl.read_parquet(args.states).to_dicts()[: args.samples]
    from tests.fixtures_model import make_states

    n = args.samples or 240
    return make_states(n_tasks=max(1, n // 3))[:n]


def _default_run(name: str, *keys: str):
    """A value of the default run's configuration (``conf/base/<name>.yml``)."""
    import yaml

    value = yaml.safe_load((ROOT / "conf" / "base" / f"{name}.yml").read_text())
    for key in keys:
        value = value[key]
    return value


def _prompt():
    from rmsweb_kedro.contracts.prompts import PromptConfig

    return PromptConfig.model_validate(_default_run("globals", "policy_prompt"))


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


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
    from rmsweb_kedro.models.modeling import load_model, packed_attention, rope_index
    from rmsweb_kedro.training.loop import train_loop
    from rmsweb_kedro.training.sft import SFTCollator, SFTConfig, sft_loss

    model, processor = load_model({"path": checkpoint})
    states = _states(args)
    config = SFTConfig(
        prompt=_prompt(),
        loop={
            "output_dir": tempfile.mkdtemp(),
            "max_steps": args.steps,
            "batch_size": args.batch_size,
            "mixed_precision": PRECISIONS[args.precision],
            "eval_every": 0,
            "log_every": 1,
            "progress": False,
            "resume": False,
            "save_every": 0,
            "warmup_steps": 2,
            "micro_batch_tokens": args.micro_batch_tokens if args.child == "budget" else None,
        },
        loss_on="assistant",
        batching="padded" if args.child == "padded" else "packed",
    )
    packed = config.batching == "packed"
    collate = SFTCollator(
        processor, config.prompt, config.loss_on, rope_index=rope_index(model) if packed else None
    )
    marks: list[tuple[float, float]] = []
    computed = {"tokens": 0, "padding": 0, "measuring_s": 0.0}
    last = {"call": "loss"}

    def timed_collate(samples):  # a step collates all its micro-batches, then trains on them: a mark a step
        if last["call"] == "loss":
            marks.append(_clock())
        last["call"] = "collate"
        return collate(samples)

    def timed_loss(model, batch):
        last["call"] = "loss"
        real = int(batch["attention_mask"].sum()) if "attention_mask" in batch else batch["input_ids"].numel()
        computed["tokens"] += batch["input_ids"].numel()
        computed["padding"] += batch["input_ids"].numel() - real
        return sft_loss(model, batch)

    def sample_tokens(state):
        started = time.perf_counter()
        tokens = collate.sample_tokens(state)
        computed["measuring_s"] += time.perf_counter() - started
        return tokens

    with packed_attention(model) if packed else contextlib.nullcontext():
        result = train_loop(
            model, states, timed_collate, timed_loss, config.loop, sample_tokens=sample_tokens
        )
    marks.append(_clock())
    figures = _figures(processor, states, args, marks[args.warmup :], result.history[-1]["train/loss"])
    figures |= {"padding": computed["padding"] / computed["tokens"], "measuring_s": computed["measuring_s"]}
    if args.child == "budget":
        timed = result.history[args.warmup :]
        figures |= {
            "micro_batches": sum(r["train/micro_batches"] for r in timed) / len(timed),
            "fill": sum(r["train/micro_batch_fill"] for r in timed) / len(timed),
        }
    return figures


def _figures(processor, states, args, marks: list[tuple[float, float]], final_loss) -> dict:
    """Tokens/s over the timed steps (mean real tokens a sample x batch x steps / seconds, by the wall clock and
    by CPU time) and peak memory."""
    tokens = _tokens_per_sample(processor, states, _prompt())
    consumed = sum(tokens) / len(tokens) * args.batch_size * (len(marks) - 1)
    return {
        "tokens_per_s": consumed / (marks[-1][0] - marks[0][0]),
        "tokens_per_cpu_s": consumed / (marks[-1][1] - marks[0][1]),
        "peak_memory_mb": _peak_memory_mb(),
        "final_loss": final_loss,
        "timed_steps": len(marks) - 1,
    }


def run_trl(checkpoint: str, args) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig as TRLConfig
    from trl import SFTTrainer

    from rmsweb_kedro.contracts.prompts import build_messages
    from rmsweb_kedro.models.modeling import load_model

    model, processor = load_model({"path": checkpoint})
    prompt = _prompt()
    states = _states(args)
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
            self.marks: list[tuple[float, float]] = []

        def on_step_end(self, *_, **__):
            self.marks.append(_clock())

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
        bf16=args.precision == "bf16",
        logging_steps=10_000,
        save_strategy="no",
        report_to=[],
        seed=0,
        assistant_only_loss=True,
        max_length=None,
        packing=False,
        padding_free=True,
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
    clock.marks.append(_clock())  # the first step's start
    trainer.train()
    # TRL shuffles with its own sampler; the batches hold the same samples on average: mean tokens a sample.
    figures = _figures(
        processor, states, args, clock.marks[args.warmup :], trainer.state.log_history[-1].get("train_loss")
    )
    return figures | {"padding": 0.0}  # padding_free: one row of real tokens a batch


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=2048,
        help="budget's loop.micro_batch_tokens (16 default-run samples are ~3.3k tokens: ~2 micro-batches)",
    )
    parser.add_argument("--samples", type=int, help="states used (default: all of --states, else 240)")
    parser.add_argument("--states", help="a parquet of STATE rows (a default run's SFT training states)")
    parser.add_argument(
        "--trainers", nargs="+", choices=TRAINERS, default=list(TRAINERS), help="which to run (default: all)"
    )
    parser.add_argument(
        "--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS), help="default: fp32 bf16"
    )
    parser.add_argument(
        "--kernels",
        nargs="+",
        choices=KERNELS,
        default=["portable"],
        help="default: portable (the project's)",
    )
    parser.add_argument("--child", choices=TRAINERS)
    parser.add_argument("--precision", choices=PRECISIONS, default="bf16")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads in each trainer (default: torch's); 1 on a shared machine, where waiting threads of "
        "many small parallel kernels dominate the time",
    )
    parser.add_argument("--checkpoint")
    args = parser.parse_args()
    if args.child:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        figures = (run_trl if args.child == "trl" else run_ours)(args.checkpoint, args)
        print("RESULT " + json.dumps(figures))
        return

    from rmsweb_kedro.models.modeling import build_tiny_model, save_checkpoint
    from rmsweb_kedro.models.numerics import cpu_model

    name, flags = cpu_model()
    print(f"CPU {name}; {len(flags)} SIMD sets, bf16 instructions: "
          f"{' '.join(f for f in flags if 'bf16' in f) or 'none (bf16 autocast is emulated)'}")  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="sft-bench-"))
    from rmsweb_kedro.contracts.prompts import build_messages

    states, prompt = _states(args), _prompt()
    corpus = [  # the texts the default run's tokenizer is trained on (pipelines/sft/nodes.py)
        part["text"]
        for state in states
        for message in build_messages(state, prompt, with_reference=True)[0]
        for part in message["content"]
        if part["type"] == "text"
    ]
    model, processor = build_tiny_model(corpus, _default_run("parameters_sft", "sft", "tiny"))
    save_checkpoint(model, processor, work / "tiny")
    results = {}
    for kernels in args.kernels:
        for precision in args.precisions:
            for trainer in args.trainers:
                key = f"{trainer}/{precision}/{kernels}"
                results[key] = _child(trainer, precision, kernels, work / "tiny", args)
                _print(key, results[key])
    _ratios(results, args)
    threads = args.threads or "default"
    print(
        f"steps {args.steps}, batch {args.batch_size}, budget {args.micro_batch_tokens} tokens, "
        f"{len(_states(args))} states, torch threads {threads}, load average {os.getloadavg()[0]:.1f}"
    )


def _child(trainer: str, precision: str, kernels: str, checkpoint: Path, args) -> dict:
    """One trainer's figures, measured in a child process started with ``kernels``' environment."""
    command = [
        sys.executable, __file__, "--child", trainer, "--precision", precision, "--checkpoint", str(checkpoint),
        "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(args.batch_size),
        "--micro-batch-tokens", str(args.micro_batch_tokens),
        *(["--samples", str(args.samples)] if args.samples else []),
        *(["--states", args.states] if args.states else []),
        *(["--threads", str(args.threads)] if args.threads else []),
    ]  # fmt: skip
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "RMSWEB_CPU_KERNELS": kernels}
    if kernels == "native":  # the pins this process inherited from importing rmsweb_kedro would still apply
        from rmsweb_kedro.models.numerics import PORTABLE_KERNELS

        env = {k: v for k, v in env.items() if k not in PORTABLE_KERNELS}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    line = next((out for out in done.stdout.splitlines() if out.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{trainer} ({precision}, {kernels} kernels) failed:\n{done.stderr[-4000:]}")
    return json.loads(line[len("RESULT ") :])


def _print(key: str, figures: dict) -> None:
    budget = (
        f"   {figures['micro_batches']:.2f} micro-batches a step, {figures['fill']:.0%} full, measuring "
        f"samples {figures['measuring_s']:.1f} s"
        if key.startswith("budget/")
        else ""
    )
    print(
        f"{key:24s} tokens/s {figures['tokens_per_s']:7.0f} (per CPU-s {figures['tokens_per_cpu_s']:7.0f})   "
        f"padding {figures['padding']:6.1%}   peak memory {figures['peak_memory_mb']:8.0f} MiB   final loss "
        f"{figures['final_loss']:.3f}{budget}",
        flush=True,
    )


def _ratios(results: dict, args) -> None:
    """packed/padded, budget/padded and against TRL at each precision and kernel setting; fp32/bf16 a trainer."""
    pairs = [
        ("packed", "padded", " (target >= 1.3)"),
        ("budget", "padded", " (target >= 1.3)"),
        ("budget", "packed", ""),
        ("packed", "trl", ""),
        ("padded", "trl", ""),
    ]
    for metric in ("tokens_per_s", "tokens_per_cpu_s"):
        ratios = []
        for kernels in args.kernels:
            for precision in args.precisions:
                at = f"/{precision}/{kernels}"
                ratios += [
                    f"{a}/{b} {results[a + at][metric] / results[b + at][metric]:.2f}{note} ({precision}, {kernels})"
                    for a, b, note in pairs
                    if a + at in results and b + at in results
                ]
            ratios += [
                f"{trainer} fp32/bf16 {results[f'{trainer}/fp32/{kernels}'][metric] / results[f'{trainer}/bf16/{kernels}'][metric]:.2f} ({kernels})"
                for trainer in args.trainers
                if {f"{trainer}/fp32/{kernels}", f"{trainer}/bf16/{kernels}"} <= results.keys()
            ]
        if {"portable", "native"} <= set(args.kernels):
            ratios += [
                f"{key} portable/native {results[key][metric] / results[key.replace('/portable', '/native')][metric]:.2f}"
                for key in results
                if key.endswith("/portable")
            ]
        print(f"{metric}: " + ", ".join(ratios))


if __name__ == "__main__":
    main()
