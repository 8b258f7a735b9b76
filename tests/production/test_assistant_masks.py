"""Assistant masks for any chat template: found by rendering, equal token by token to the marker-based masks of the
tiny template (with and without screenshots), and the only way SFT trains on the released layout (no markers)."""

import math

import pytest

from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages
from rmsweb_kedro.models.modeling import load_model, load_processor
from rmsweb_kedro.training.sft import IGNORE_INDEX, SFTCollator, SFTConfig, assistant_token_mask, run_sft

SCREENSHOTS = PromptConfig(observation=["screenshot", "axtree"])


@pytest.mark.parametrize("prompt", [PromptConfig(), SCREENSHOTS], ids=["axtree", "screenshot+axtree"])
def test_rendered_spans_equal_the_generation_markers_token_by_token(
    tiny_checkpoint, screenshot_states, prompt
):
    processor = load_processor(tiny_checkpoint)  # the tiny template has {% generation %} markers: the oracle
    for state in screenshot_states[:6]:
        messages = build_messages(state, prompt, processor.tokenizer, with_reference=True)[0]
        marked = processor.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids, oracle = list(marked["input_ids"][0]), list(marked["assistant_masks"][0])
        assert sum(oracle) > 0 and (ids.count(processor.image_token_id) > 1) == (prompt is SCREENSHOTS)
        assert assistant_token_mask(processor, messages, ids) == oracle


def test_released_template_has_no_markers_and_the_collator_still_finds_the_reply(
    released_checkpoint, screenshot_states
):
    processor = load_processor(released_checkpoint)
    assert (
        "{%- generation" not in processor.tokenizer.chat_template
        and "{% generation" not in processor.chat_template
    )
    states = [screenshot_states[0], screenshot_states[4]]
    messages = build_messages(states[0], SCREENSHOTS, processor.tokenizer, with_reference=True)[0]
    marked = processor.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assert (
        sum(marked["assistant_masks"][0]) == 0
    )  # what transformers gives without markers: nothing to train on

    batch = SFTCollator(processor, SCREENSHOTS, loss_on="assistant")(states)
    assert {"pixel_values", "image_grid_thw", "mm_token_type_ids"} <= set(batch)
    for row, state in enumerate(states):
        labelled = batch["labels"][row][batch["labels"][row] != IGNORE_INDEX]
        reply = f"Thought: {state['reference_thought']}\nAction: {state['reference_action']}<|im_end|>"
        assert processor.tokenizer.decode(labelled) == reply
    assert batch["loss_tokens"]["label"] == int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


SILENT_ASSISTANT = (  # renders every turn but the assistant's: nothing is left to supervise
    "{%- for m in messages %}{%- if m.role != 'assistant' %}"
    "<|im_start|>{{ m.role }}\n{{ m.content[-1].text }}<|im_end|>\n{%- endif %}{%- endfor %}"
)


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (SILENT_ASSISTANT, "no token to supervise"),
        ("released, assistant role renamed", "renders the conversation before assistant turn 2 differently"),
    ],
)
def test_a_sample_without_a_locatable_reply_is_named(released_checkpoint, tiny_states, template, message):
    processor = load_processor(released_checkpoint)
    if template != SILENT_ASSISTANT:  # the generation prompt opens a turn the template never renders
        template = processor.chat_template.replace("message.role == 'assistant'", "message.role == 'nobody'")
    processor.chat_template = template
    with pytest.raises(ValueError, match=rf"state 'shop-000-a1:0': .*{message}"):
        SFTCollator(processor, PromptConfig(), loss_on="assistant")([tiny_states[0]])


def test_sft_on_the_released_layout_trains_on_assistant_tokens_with_screenshots(
    tmp_path, released_checkpoint, screenshot_states
):
    model, processor = load_model({"path": str(released_checkpoint)})
    config = SFTConfig(
        prompt=SCREENSHOTS,
        loss_on="assistant",
        loop={
            "output_dir": str(tmp_path / "run"),
            "max_steps": 4,
            "batch_size": 3,
            "learning_rate": 3e-3,
            "warmup_steps": 0,
            "eval_every": 0,
            "progress": False,
            "save_checkpoints": False,
        },
    )
    result = run_sft(model, processor, screenshot_states[:9], screenshot_states[9:], config)
    losses = [row["train/loss"] for row in result.history]
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0]
    assert all(row["train/label_tokens"] > 0 for row in result.history)
    assert math.isfinite(result.last("eval/loss"))
