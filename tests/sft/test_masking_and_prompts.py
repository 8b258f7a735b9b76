"""Assistant-only labels, checked token by token, and the prompt builder's cuts and history."""

import pytest

from rmsweb_kedro.contracts.actions import format_reply, parse_action
from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages, cut_axtree
from rmsweb_kedro.training.sft import IGNORE_INDEX, SFTCollator


@pytest.fixture(scope="module")
def processor(tiny_checkpoint):
    from rmsweb_kedro.models.modeling import load_processor

    return load_processor(tiny_checkpoint)


def test_labels_cover_exactly_the_assistant_reply(processor, tiny_states):
    states = [tiny_states[0], tiny_states[4]]  # different lengths, so one row is left-padded
    batch = SFTCollator(processor, PromptConfig(), loss_on="assistant")(states)
    tokenizer = processor.tokenizer
    assert batch["attention_mask"][0].sum() != batch["attention_mask"][1].sum()
    for row, state in enumerate(states):
        ids, labels = batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
        reply = (
            format_reply(state["reference_thought"], parse_action(state["reference_action"])) + "<|im_end|>"
        )
        reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
        # the reply is the last thing in the sequence, right before the template's final newline
        start = len(ids) - 1 - len(reply_ids)
        assert ids[start : start + len(reply_ids)] == reply_ids
        for position, (token, label) in enumerate(zip(ids, labels, strict=True)):
            inside = start <= position < start + len(reply_ids)
            assert label == (token if inside else IGNORE_INDEX), (position, tokenizer.decode([token]))


def test_loss_on_all_labels_every_real_token(processor, tiny_states):
    """Every real token but a row's first, which nothing of its own sample predicts (left padding precedes it)."""
    batch = SFTCollator(processor, PromptConfig(), loss_on="all")([tiny_states[0], tiny_states[4]])
    real = batch["attention_mask"].bool()
    predicted = real & (real.cumsum(dim=1) > 1)
    assert not real[:, 0].all()  # left padding: a row starts after padding
    assert (batch["labels"][predicted] == batch["input_ids"][predicted]).all()
    assert (batch["labels"][~predicted] == IGNORE_INDEX).all()
    assert "label_weights" not in batch  # reply_weight 1: the plain token mean


def test_reply_weight_weighs_exactly_the_reply_and_the_loss_is_the_weighted_mean(
    processor, tiny_states, tiny_checkpoint
):
    """``loss_on="all"`` with ``reply_weight: 4``: weight 4 on the tokens the assistant mask marks, 1 on the other
    real tokens, 0 on padding; the step's normaliser is the weights' sum, so the loss is the weighted token mean."""
    import torch
    import torch.nn.functional as F

    from rmsweb_kedro.models.modeling import load_model
    from rmsweb_kedro.training.sft import sft_loss

    states = [tiny_states[0], tiny_states[4]]
    weighted = SFTCollator(processor, PromptConfig(), loss_on="all", reply_weight=4.0)(states)
    reply = SFTCollator(processor, PromptConfig(), loss_on="assistant")(states)["labels"] != IGNORE_INDEX
    real = weighted["attention_mask"].bool()
    real &= real.cumsum(dim=1) > 1  # a row's first token is not predicted: weight 0
    weights = weighted["label_weights"]
    assert (
        (weights[reply] == 4.0).all()
        and (weights[real & ~reply] == 1.0).all()
        and (weights[~real] == 0).all()
    )
    assert weighted["loss_tokens"]["label"] == float(weights[:, 1:].sum()) > real[:, 1:].sum()

    model = load_model({"path": str(tiny_checkpoint), "dtype": "float32"})[0].eval()
    weighted["step_tokens"] = weighted["loss_tokens"]
    with torch.no_grad():
        loss, _ = sft_loss(model, weighted)
        logits = model(input_ids=weighted["input_ids"], attention_mask=weighted["attention_mask"]).logits
    labels = weighted["labels"][:, 1:].flatten()
    ce = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels, reduction="none", ignore_index=IGNORE_INDEX)
    expected = (ce * weights[:, 1:].flatten()).sum() / weights[:, 1:].sum()
    assert torch.isclose(loss, expected) and not torch.isclose(loss, ce[labels >= 0].mean())


def test_prompt_shows_last_k_actions_and_cuts_the_tree(processor, tiny_states):
    state = dict(tiny_states[2], previous_actions=["click(1)", "click(2)", "click(3)", "click(4)"])
    state["axtree"] = "\n".join(f'link "item number {i}" [{i}]' for i in range(200))
    config = PromptConfig(history_k=2, axtree_max_tokens=40)
    messages, info = build_messages(state, config, processor.tokenizer, with_reference=True)
    user = messages[1]["content"][-1]["text"]
    assert "Previous actions: click(3); click(4)" in user
    assert info["truncated"] and user.endswith("...")
    page = user.split("Page:\n", 1)[1]
    assert len(processor.tokenizer(page)["input_ids"]) <= 40 + 3
    assert messages[2]["content"][0]["text"] == "Thought: add it to the cart\nAction: click(2)"
    text, truncated, _ = cut_axtree("short tree", 40, processor.tokenizer)
    assert (text, truncated) == ("short tree", False)


def test_without_the_system_turn_the_labels_still_cover_exactly_the_reply(processor, tiny_states):
    """The tiny default's prompt (``system_turn: false``): user turn first, the reply still found token by token."""
    config = PromptConfig(system_turn=False)
    messages, _ = build_messages(tiny_states[0], config, processor.tokenizer, with_reference=True)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    with_system = build_messages(tiny_states[0], PromptConfig(), processor.tokenizer, with_reference=True)[0]
    assert with_system[1:] == messages
    full = SFTCollator(processor, PromptConfig(), loss_on="assistant")([tiny_states[0]])
    short = SFTCollator(processor, config, loss_on="assistant")([tiny_states[0]])
    assert short["input_ids"].shape[1] < full["input_ids"].shape[1]
    assert "You are a web agent" not in processor.tokenizer.decode(short["input_ids"][0])
    reply_full = full["labels"][full["labels"] != IGNORE_INDEX].tolist()
    assert short["labels"][short["labels"] != IGNORE_INDEX].tolist() == reply_full != []


def test_screenshot_part_when_configured(tmp_path, tiny_states):
    state = dict(tiny_states[0], screenshot="shots/0.png")
    messages, _ = build_messages(state, PromptConfig(observation=["screenshot"], image_root=str(tmp_path)))
    parts = messages[1]["content"]
    assert parts[0] == {"type": "image", "image": str(tmp_path / "shots/0.png")}
    assert "Page:" not in parts[1]["text"]


def test_reply_weight_without_observation_loss_is_an_error():
    from rmsweb_kedro.training.sft import SFTConfig

    loop = {"output_dir": "unused"}
    assert SFTConfig(loop=loop, loss_on="all", reply_weight=4).reply_weight == 4
    with pytest.raises(ValueError, match=r"reply_weight 4.0 .*\(loss_on='assistant'\)"):
        SFTConfig(loop=loop, loss_on="assistant", reply_weight=4)
