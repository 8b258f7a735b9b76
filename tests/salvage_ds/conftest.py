"""A tiny causal LM and byte-level BPE tokenizer for the Salvage-DS gradient checks (built in memory, seconds)."""

from __future__ import annotations

import pytest

REPLIES = [
    'Thought: the search box is [5]\nAction: type(5, "Paris")',
    "Thought: open the cart\nAction: click(12)",
    'Thought: pick the class\nAction: select_option(7, "Economy")',
    'Action: scroll("down")',
]


@pytest.fixture(scope="session")
def tiny_lm():
    """(model, tokenizer): a 2-layer Qwen3 with a BPE vocabulary trained on action replies."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(REPLIES * 10 + ["State: page with a search box and a cart"] * 10, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    return Qwen3ForCausalLM(config).float(), tokenizer


ITEMS = [
    "blue scarf",
    "red hat",
    "green mug",
    "yellow lamp",
    "black shoe",
    "white cup",
    "pink sock",
    "grey coat",
]


def make_states(n: int, seed: int = 0) -> list[dict]:
    """STATE_SCHEMA rows of a toy shop: open the named item among four links; the reference clicks its id."""
    import random

    rng = random.Random(seed)
    states = []
    for i in range(n):
        items, ids = rng.sample(ITEMS, 4), rng.sample(range(2, 10), 4)
        target = rng.randrange(4)
        states.append(
            {
                "state_id": f"shop-{seed}:{i}",
                "task_id": f"shop-{seed}-{i}",
                "trajectory_id": f"shop-{seed}-{i}",
                "step_index": 0,
                "site": "shop",
                "instruction": f"Open the {items[target]}",
                "previous_actions": [],
                "url": "http://shop.sandbox.test/",
                "axtree": "\n".join(f'link "{name}" [{k}]' for name, k in zip(items, ids, strict=True)),
                "screenshot": None,
                "reference_thought": f"{items[target]} is [{ids[target]}]",
                "reference_action": f"click({ids[target]})",
            }
        )
    return states


def loop_config(tmp_path, name: str, **changes):
    """A short, constant-learning-rate LoopConfig writing under ``tmp_path/name``; ``changes`` override."""
    from rmsweb_kedro.training.loop import LoopConfig

    settings = dict(
        output_dir=str(tmp_path / name),
        max_steps=12,
        batch_size=4,
        learning_rate=3e-3,
        min_learning_rate_ratio=1.0,
        warmup_steps=0,
        weight_decay=0.0,
        eval_every=0,
        resume=False,
        progress=False,
    )
    return LoopConfig(**(settings | changes))


def fine_tune(model, prepared, pad_id: int, steps: int, lr: float = 3e-3) -> None:
    """A few AdamW steps of next-token likelihood on the whole reference replies (a stand-in for SFT)."""
    import torch

    from rmsweb_kedro.training.salvage_ds.inputs import continuation_logits
    from rmsweb_kedro.training.salvage_ds.objective import token_logprobs

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        logits, targets, mask = continuation_logits(
            model, [s.prompt_ids for s in prepared], [s.reply_ids for s in prepared], pad_id
        )
        loss = -(token_logprobs(logits, targets) * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def fine_tuned_tiny(head_dim: int = 16):
    """(model, processor, states, prompt config): a tiny Qwen3-VL (modeling.build_tiny_model) fine-tuned briefly on
    toy states, so it writes actions and gets some right: the starting point Salvage-DS expects."""
    import torch

    from rmsweb_kedro.contracts.prompts import PromptConfig, reference_reply
    from rmsweb_kedro.models.modeling import build_tiny_model
    from rmsweb_kedro.training.salvage_ds import prepare_states

    states = make_states(8)
    prompt = PromptConfig(include_thought=False, history_k=0)
    corpus = [reference_reply(s, prompt) for s in states] + [s["axtree"] + s["instruction"] for s in states]
    size = {
        "vocab_size": 300,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "head_dim": head_dim,
        "intermediate_size": 128,
    }
    vision = {"vision_hidden_size": 32, "vision_depth": 1, "vision_intermediate_size": 64}
    model, processor = build_tiny_model(corpus, size | vision)
    torch.manual_seed(0)
    fine_tune(model, prepare_states(states, processor, prompt), processor.tokenizer.pad_token_id, steps=30)
    return model, processor, states, prompt


@pytest.fixture(scope="session")
def sft_tiny():
    """:func:`fine_tuned_tiny` (head_dim 16), once a session."""
    return fine_tuned_tiny()


def lora_tiny():
    """(LoRA model, processor, states, prompt config): :func:`fine_tuned_tiny` with head_dim 32 (what vLLM's CPU
    attention takes), then a fresh rank-8 LoRA adapter (dropout 0) on top: the policy the served sampler's tests
    and benchmarks/salvage_ds_throughput.py train."""
    from rmsweb_kedro.models.modeling import LoraSettings, add_lora

    model, processor, states, prompt = fine_tuned_tiny(head_dim=32)
    return add_lora(model, LoraSettings(r=8, alpha=16, dropout=0.0)), processor, states, prompt
