"""The shared loop through SFT: val loss falls, an interrupted run resumes, the saved model reloads, and two
processes under ``accelerate launch`` (gloo on CPU) train a step."""

import json
import subprocess
from contextlib import nullcontext

import pytest
import torch

from rmsweb_kedro.models.modeling import load_model, save_checkpoint
from rmsweb_kedro.training.launch import launch_command
from rmsweb_kedro.training.loop import evaluate, make_accelerator
from rmsweb_kedro.training.sft import SFTCollator, SFTConfig, run_sft, sft_loss


def _config(tmp_path, **loop):
    settings = {
        "output_dir": str(tmp_path / "run"),
        "batch_size": 8,
        "warmup_steps": 2,
        "eval_every": 0,
        "log_every": 5,
        "progress": False,
        **loop,
    }
    return SFTConfig(loop=settings, loss_on="all")


@pytest.mark.slow
def test_short_sft_lowers_val_loss_and_saves_a_plain_checkpoint(tmp_path, tiny_checkpoint, tiny_states):
    from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration

    model, processor = load_model({"path": str(tiny_checkpoint)})
    train, val = tiny_states[:96], tiny_states[96:]
    config = _config(tmp_path, max_steps=25)
    collate = SFTCollator(processor, config.prompt, config.loss_on)
    before = evaluate(model, val, collate, sft_loss, config.loop, make_accelerator(config.loop))["eval/loss"]
    result = run_sft(model, processor, train, val, config)
    assert result.step == 25 and [row["step"] for row in result.history] == list(range(1, 26))
    assert result.last("eval/loss") < before - 1.0

    save_checkpoint(result.model, processor, tmp_path / "saved")
    reloaded = Qwen3VLForConditionalGeneration.from_pretrained(tmp_path / "saved")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "saved")
    ids = tokenizer("Task: Add the blue mug to the cart", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(reloaded(input_ids=ids).logits, result.model(input_ids=ids).logits, atol=1e-5)


class _Interrupt(Exception):
    pass


@pytest.mark.parametrize("budget", [None, 400])  # micro-batches of 4 samples; of at most 400 tokens
def test_interrupted_run_resumes_with_step_and_history(tmp_path, tiny_checkpoint, tiny_states, budget):
    """With a token budget (``loop.micro_batch_tokens``, packed) a step's 4 samples (177-213 tokens) are re-split
    into micro-batches of 1-2 samples; the resumed run continues with the same micro-batches."""
    from rmsweb_kedro.models.modeling import packed_attention, rope_index
    from rmsweb_kedro.training.loop import train_loop

    seen: dict[str, list[int]] = {"reference": [], "interrupted": []}

    def run(output, loss_fn, resume=True):
        model, processor = load_model({"path": str(tiny_checkpoint)})
        config = _config(tmp_path / output, max_steps=6, save_every=2, resume=resume, batch_size=4)
        packing = budget is not None
        if packing:
            config.loop.micro_batch_tokens = budget
        collate = SFTCollator(
            processor, config.prompt, config.loss_on, rope_index=rope_index(model) if packing else None
        )

        def recorded(model, batch):  # the micro-batches as trained: their tokens
            seen[output].append(int(batch["input_ids"].numel()))
            return loss_fn(model, batch)

        with packed_attention(model) if packing else nullcontext():
            return train_loop(
                model, tiny_states, collate, recorded, config.loop, sample_tokens=collate.sample_tokens
            )

    reference = run("reference", sft_loss)

    calls = {"n": 0}
    before = int(sum(row.get("train/micro_batches", 1) for row in reference.history[:4]))  # steps 1-4's

    def crashing_loss(model, batch):
        calls["n"] += 1
        if calls["n"] == before + 1:  # during step 5: the last checkpoint is step 4
            raise _Interrupt
        return sft_loss(model, batch)

    with pytest.raises(_Interrupt):
        run("interrupted", crashing_loss)
    resumed = run("interrupted", sft_loss)
    assert resumed.resumed_from == 4 and resumed.step == 6
    assert [row["step"] for row in resumed.history] == [1, 2, 3, 4, 5, 6]
    # same data order, same RNG and optimizer states: the resumed run's losses are the uninterrupted run's
    losses = [row["train/loss"] for row in resumed.history]
    expected = [row["train/loss"] for row in reference.history]
    assert losses == pytest.approx(expected, rel=1e-4)
    # the micro-batches of the resumed run (the crashed one trained again from the checkpoint) are the reference's
    assert seen["interrupted"][:before] + seen["interrupted"][before + 1 :] == seen["reference"]
    if budget is not None:
        counts = [row["train/micro_batches"] for row in reference.history]
        assert len(seen["reference"]) == sum(counts) and min(counts) > 1  # split by the budget
        assert [row["train/micro_batches"] for row in resumed.history] == counts
        assert max(seen["reference"]) <= budget


@pytest.mark.slow
def test_two_process_accelerate_launch_trains_a_step(tmp_path, tiny_checkpoint, tiny_states):
    import polars as pl

    from rmsweb_kedro.contracts.schema import STATE_SCHEMA

    pl.DataFrame(tiny_states[:32], schema=STATE_SCHEMA).write_parquet(tmp_path / "train.parquet")
    pl.DataFrame(tiny_states[32:40], schema=STATE_SCHEMA).write_parquet(tmp_path / "val.parquet")
    config = _config(tmp_path, max_steps=1, batch_size=2, mixed_precision="no")
    job = {
        "model_dir": str(tiny_checkpoint),
        "train_path": str(tmp_path / "train.parquet"),
        "val_path": str(tmp_path / "val.parquet"),
        "output_dir": config.loop.output_dir,
        "config": config.model_dump(mode="json"),
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    # the node's path: conf/base/accelerate/cpu_2proc.yaml (2 processes, gloo on CPU)
    command = launch_command(
        "cpu_2proc", "conf/base/accelerate", "rmsweb_kedro.training.sft", tmp_path / "job.json"
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    history = [json.loads(line) for line in open(tmp_path / "run" / "history.jsonl")]
    assert [row["step"] for row in history] == [1] and "eval/loss" in history[0]
    load_model({"path": str(tmp_path / "run" / "final")})


def test_a_launched_entry_point_loads_every_base_checkpoint_field(tmp_path, tiny_checkpoint):
    """What the node's ``base_checkpoint`` says reaches the launched processes: the attention implementation, the
    dtype and the LoRA adapter (saved with the base by the node; its settings kept, trainable), not only the path."""
    from rmsweb_kedro.models.modeling import LoadConfig
    from rmsweb_kedro.training.launch import job_checkpoint, load_job_model

    spec = LoadConfig(path=str(tiny_checkpoint), dtype="bfloat16", attn_implementation="eager", lora={"r": 4})
    base, processor = load_model(spec)
    save_checkpoint(base, processor, tmp_path / "base")  # as the node does before launching
    job = {"model_dir": str(tmp_path / "base"), "checkpoint": job_checkpoint(tmp_path / "base", spec)}
    model, _ = load_job_model(job)
    assert model.config._attn_implementation == "eager"
    assert model.get_base_model().model.language_model.embed_tokens.weight.dtype == torch.bfloat16
    assert model.peft_config["default"].r == 4
    assert any(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)
    # without a checkpoint spec (the tiny default): the path alone, float32 master weights to train
    plain, _ = load_job_model({"model_dir": str(tiny_checkpoint)})
    assert plain.config._attn_implementation == "sdpa" and plain.dtype == torch.float32


def test_the_same_short_sft_twice_saves_the_same_checkpoint_bytes(tmp_path, tiny_checkpoint, tiny_states):
    """The default run's reproducibility on one machine (README, "What the default run gives"): the same data,
    seeds and settings (mixed_precision auto, reply weight and observation loss as in conf/base) give a checkpoint
    with the same content hash twice, the hash the run manifest records."""
    from rmsweb_kedro.runs.provenance import directory_sha256

    hashes = []
    for attempt in ("a", "b", "untrained"):
        model, processor = load_model({"path": str(tiny_checkpoint)})  # fresh weights each time
        config = SFTConfig(
            loop={"output_dir": str(tmp_path / attempt / "run"), "batch_size": 4, "warmup_steps": 1,
                  "max_steps": 0 if attempt == "untrained" else 3, "eval_every": 0, "save_every": 0,
                  "mixed_precision": "auto", "seed": 0, "progress": False},
            loss_on="all",
            reply_weight=4.0,
        )  # fmt: skip
        if config.loop.max_steps:
            model = run_sft(model, processor, tiny_states[:24], [], config).model
        save_checkpoint(model, processor, tmp_path / attempt / "saved")
        hashes.append(directory_sha256(tmp_path / attempt / "saved")[0])
    assert hashes[0] == hashes[1]
    assert hashes[2] != hashes[0]  # the hash sees the weights: three steps changed them


def test_samples_over_the_token_budget_train_alone_and_are_logged_once(
    tmp_path, tiny_checkpoint, tiny_states, caplog
):
    """A budget under every sample's length (177-213 tokens): each sample is a micro-batch of its own, none dropped
    or cut, and each is logged once although the second epoch meets it again."""
    model, processor = load_model({"path": str(tiny_checkpoint)})
    states = tiny_states[:4]
    loop = _config(tmp_path, max_steps=2, batch_size=4, save_checkpoints=False).loop
    config = SFTConfig(
        loop=loop.model_copy(update={"micro_batch_tokens": 100}), loss_on="all", batching="packed"
    )
    with caplog.at_level("WARNING", logger="rmsweb_kedro.training.loop"):
        result = run_sft(model, processor, states, [], config)
    assert [row["train/micro_batches"] for row in result.history] == [
        4,
        4,
    ]  # two epochs of the same 4 samples
    assert [row["train/label_tokens"] for row in result.history] == [
        result.history[0]["train/label_tokens"]
    ] * 2
    over = [r for r in caplog.records if "over loop.micro_batch_tokens 100" in r.getMessage()]
    assert len(over) == 4
