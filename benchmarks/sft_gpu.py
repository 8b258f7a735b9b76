"""SFT steps of a real-size Qwen3-VL (random weights, bf16) through our loop on one GPU: tokens/s, peak memory.

    .venv/bin/python benchmarks/sft_gpu.py --preset 8b --steps 10 --batch-size 4 --seq-len 2048 [--image]
    .venv/bin/python benchmarks/sft_gpu.py --preset tiny --device cpu --steps 3     # a smoke run without a GPU

Presets follow the published Qwen3-VL-2B/8B-Instruct configs (text and vision towers); weights are random, in
bf16, trained with AdamW (bf16 states) and gradient checkpointing. Samples are random token sequences of
``--seq-len`` (with ``--image``: one 448x448 random image a sample, so the vision tower runs too); the loss is on
every token. Prints tokens/s after ``--warmup`` steps and the peak CUDA memory allocated.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRESETS = {
    "8b": {
        "text": {
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
        },
        "vision": {
            "depth": 27,
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_heads": 16,
            "deepstack_visual_indexes": [8, 16, 24],
        },
    },
    "2b": {
        "text": {
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
        },
        "vision": {
            "depth": 24,
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_heads": 16,
            "deepstack_visual_indexes": [5, 11, 17],
        },
    },
    "tiny": {
        "text": {
            "hidden_size": 128,
            "intermediate_size": 384,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
        },
        "vision": {
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 2,
            "deepstack_visual_indexes": [1],
        },
    },
}
VOCAB = 151_936
IMAGE_PAD, VISION_START, VISION_END = 151_655, 151_652, 151_653


def build(preset: str):
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    spec = PRESETS[preset]
    head_dim = spec["text"]["head_dim"]
    section = [head_dim // 2 - 2 * (head_dim // 8), head_dim // 8, head_dim // 8]  # sums to head_dim / 2
    config = Qwen3VLConfig(
        text_config={
            **spec["text"],
            "vocab_size": VOCAB,
            "max_position_embeddings": 32768,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5e6,
                "mrope_section": section,
                "mrope_interleaved": True,
            },
        },
        vision_config={
            **spec["vision"],
            "patch_size": 16,
            "out_hidden_size": spec["text"]["hidden_size"],
            "num_position_embeddings": 2304,
        },
        image_token_id=IMAGE_PAD,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
    )
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3VLForConditionalGeneration(config).to(torch.bfloat16)
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    return model


def samples(n: int, seq_len: int, with_image: bool, seed: int = 0) -> list[dict]:
    """Random token sequences; with an image, 448x448 pixels = 28x28 patches of 16 -> 196 merged image tokens."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    grid = (1, 28, 28)
    image_tokens = grid[1] * grid[2] // 4
    if with_image and seq_len < image_tokens + 8:
        raise SystemExit(f"--seq-len {seq_len} is too short for an image of {image_tokens} tokens")
    out = []
    for _ in range(n):
        ids = torch.randint(0, 150_000, (seq_len,), generator=generator)
        sample = {"input_ids": ids}
        if with_image:
            ids[1] = VISION_START
            ids[2 : 2 + image_tokens] = IMAGE_PAD
            ids[2 + image_tokens] = VISION_END
            sample["pixel_values"] = torch.randn(grid[1] * grid[2], 3 * 2 * 16 * 16, generator=generator)
            sample["image_grid_thw"] = torch.tensor([grid])
        out.append(sample)
    return out


def collate(batch: list[dict]) -> dict:
    import torch

    ids = torch.stack([s["input_ids"] for s in batch])
    out = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    if "pixel_values" in batch[0]:
        out["pixel_values"] = torch.cat([s["pixel_values"] for s in batch]).to(torch.bfloat16)
        out["image_grid_thw"] = torch.cat([s["image_grid_thw"] for s in batch])
        out["mm_token_type_ids"] = (ids == IMAGE_PAD).long()
    return out


def main() -> None:
    import torch

    from rmsweb_kedro.training.loop import LoopConfig, train_loop
    from rmsweb_kedro.training.sft import sft_loss

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="8b")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--image", action="store_true")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --device cpu with --preset tiny for a smoke run")

    model = build(args.preset)
    n_params = sum(p.numel() for p in model.parameters())
    data = samples(args.batch_size * args.steps, args.seq_len, args.image)
    marks: list[float] = []

    def timed_loss(model, batch):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        marks.append(time.perf_counter())
        return sft_loss(model, batch)

    # Saving an 8B training state takes minutes and tens of GB: the figures are about steps, so nothing is saved.
    config = LoopConfig(
        output_dir=tempfile.mkdtemp(),
        max_steps=args.steps,
        batch_size=args.batch_size,
        learning_rate=1e-5,
        warmup_steps=1,
        eval_every=0,
        save_checkpoints=False,
        resume=False,
        mixed_precision="no",
        log_every=1,
    )
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    train_loop(model, data, collate, timed_loss, config)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    marks.append(time.perf_counter())
    timed = marks[args.warmup :]
    tokens_per_s = args.batch_size * args.seq_len * (len(timed) - 1) / (timed[-1] - timed[0])
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
    print(
        f"Qwen3-VL {args.preset} (random, bf16): {n_params / 1e9:.2f}B parameters, batch {args.batch_size} x "
        f"{args.seq_len} tokens{' + 1 image' if args.image else ''}"
    )
    print(
        f"tokens/s {tokens_per_s:,.0f}   s/step {(timed[-1] - timed[0]) / (len(timed) - 1):.3f}   "
        f"peak GPU memory {peak:.1f} GiB"
    )


if __name__ == "__main__":
    main()
