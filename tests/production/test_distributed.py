"""Several processes give the one-process run: two CPU processes under ``accelerate launch`` (gloo,
conf/base/accelerate/cpu_2proc.yaml) train SFT and Salvage-DS on the released-layout fixture, with screenshots, at
the same global batch as one process, and their per-step losses match it; a launched run resumes.

Tolerance: relative 1e-3 on each step's loss. The runs see the same samples in the same order and start from the
same weights; what differs is float summation order (gradients all-reduced over 2 processes, losses summed in
another order), which moves the weights by ~1e-7 a step, far below 1e-3, while a loss normalised per micro-batch
or per process instead of per optimizer step differs by ~1e-2 on these batches (different reply lengths)."""

from __future__ import annotations

import pytest

from rmsweb_kedro.modeling import load_model
from rmsweb_kedro.prompts import PromptConfig
from rmsweb_kedro.training.launch import run_launched
from rmsweb_kedro.training.loop import LoopConfig
from rmsweb_kedro.training.salvage_ds import SalvageDSJob, SalvageDSParams, train_salvage_ds
from rmsweb_kedro.training.sft import SFTConfig, run_sft

PROMPT = PromptConfig(observation=["screenshot", "axtree"], history_k=1)
TOLERANCE = 1e-3
LOOP = {  # constant learning rate: a resumed run's schedule is the straight run's whatever max_steps says
    "learning_rate": 1e-2,
    "min_learning_rate_ratio": 1.0,
    "warmup_steps": 0,
    "eval_every": 0,
    "log_every": 1,
    "progress": False,
}


def _parquet(rows, path):
    import polars as pl

    pl.from_dicts(rows, infer_schema_length=None).write_parquet(path)
    return str(path)


def _losses(history):
    return [row["train/loss"] for row in history]


def test_accumulated_micro_batches_give_the_whole_batch_token_mean(
    tmp_path, released_checkpoint, screenshot_states
):
    runs = []
    for name, batch, accum in (("whole", 4, 1), ("accumulated", 1, 4)):
        model, processor = load_model({"path": str(released_checkpoint)})
        loop = LoopConfig(output_dir=str(tmp_path / name), max_steps=2, batch_size=batch,
                          gradient_accumulation_steps=accum, save_checkpoints=False, **LOOP)  # fmt: skip
        runs.append(run_sft(model, processor, screenshot_states[:8], [], SFTConfig(loop=loop, prompt=PROMPT)))
    whole, accumulated = (_losses(r.history) for r in runs)
    assert accumulated == pytest.approx(whole, rel=TOLERANCE)
    assert runs[1].history[0]["train/label_tokens"] == runs[0].history[0]["train/label_tokens"]


def test_two_processes_train_sft_like_one_and_a_launched_run_resumes(
    tmp_path, released_checkpoint, screenshot_states
):
    states = screenshot_states[:12]
    model, processor = load_model({"path": str(released_checkpoint)})
    one = LoopConfig(
        output_dir=str(tmp_path / "one"), max_steps=4, batch_size=4, save_checkpoints=False, **LOOP
    )
    straight = run_sft(model, processor, states, [], SFTConfig(loop=one, prompt=PROMPT))

    def launched(max_steps):
        loop = LoopConfig(output_dir=str(tmp_path / "two"), max_steps=max_steps, batch_size=2, save_every=2,
                          resume=True, **LOOP)  # fmt: skip
        job = {
            "model_dir": str(released_checkpoint),
            "train_path": _parquet(states, tmp_path / "train.parquet"),
            "output_dir": loop.output_dir,
            "config": SFTConfig(loop=loop, prompt=PROMPT).model_dump(mode="json"),
        }
        return run_launched("cpu_2proc", "conf/base/accelerate", "rmsweb_kedro.training.sft", job)

    first = launched(2)  # stops at step 2 with a checkpoint, as an interrupted run would have
    assert first.step == 2 and first.resumed_from is None
    resumed = launched(4)
    assert resumed.resumed_from == 2 and [row["step"] for row in resumed.history] == [1, 2, 3, 4]
    assert _losses(resumed.history) == pytest.approx(_losses(straight.history), rel=TOLERANCE)
    assert [r["train/label_tokens"] for r in resumed.history] == [
        r["train/label_tokens"] for r in straight.history
    ]


def test_two_processes_train_salvage_ds_like_one(tmp_path, released_checkpoint, screenshot_states):
    # Random weights write no valid action: every group is rejected (no contrast) and anchored, so the loss is the
    # anchor's token mean over the step, the same whatever was sampled; reply lengths differ between states.
    states = screenshot_states[:8]
    algorithm = SalvageDSParams(group_size=2, max_new_tokens=3, lam=1.0)
    model, processor = load_model({"path": str(released_checkpoint)})
    one = LoopConfig(
        output_dir=str(tmp_path / "one"), max_steps=3, batch_size=2, save_checkpoints=False, **LOOP
    )
    straight = train_salvage_ds(model, processor, states, algorithm, one, PROMPT)
    assert all(row["train/anchor_share"] == 1.0 for row in straight.history)

    two = LoopConfig(output_dir=str(tmp_path / "two"), max_steps=3, batch_size=1, resume=False, **LOOP)
    job = {
        "model_dir": str(released_checkpoint),
        "train_path": _parquet(states, tmp_path / "critical.parquet"),
        "splits": {},
        "output_dir": two.output_dir,
        "config": SalvageDSJob(algorithm=algorithm, loop=two, prompt=PROMPT).model_dump(mode="json"),
    }
    launched = run_launched("cpu_2proc", "conf/base/accelerate", "rmsweb_kedro.training.salvage_ds", job)
    assert launched.step == 3
    assert _losses(launched.history) == pytest.approx(_losses(straight.history), rel=TOLERANCE)
    assert [r["train/anchor_tokens"] for r in launched.history] == [
        r["train/anchor_tokens"] for r in straight.history
    ]
