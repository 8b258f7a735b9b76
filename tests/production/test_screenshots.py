"""Screenshots reach the model in every training forward: the log-prob of the same reply changes when only the
screenshot changes (SFT's loss, Salvage-DS's sampling prompt and training forward, the sampler that mining's and
evaluate's offline scoring share), on the released-layout fixture; evaluate's online episodes put the page's
screenshot in the prompt (mining's online states: tests/mining/test_probing.py). LoRA from SFT into Salvage-DS
keeps the adapter, and the KL reference is the policy with its adapter disabled."""

from __future__ import annotations

import math

import pytest
import torch

from rmsweb_kedro.contracts.prompts import PromptConfig
from rmsweb_kedro.models.modeling import load_model
from rmsweb_kedro.training.loop import LoopConfig
from rmsweb_kedro.training.salvage_ds import SalvageDSParams, SalvageDSStep, prepare_states, train_salvage_ds
from rmsweb_kedro.training.salvage_ds.inputs import continuation_logits, vision_inputs
from rmsweb_kedro.training.salvage_ds.objective import token_logprobs
from rmsweb_kedro.training.sft import SFTCollator, sft_loss
from tests.fixtures_model import draw_screenshot

PROMPT = PromptConfig(observation=["screenshot", "axtree"], history_k=1)


@pytest.fixture(scope="module")
def two_screens(tmp_path_factory, screenshot_states):
    """The same state twice, its screenshot swapped for a different picture in the second."""
    other = draw_screenshot(tmp_path_factory.mktemp("other") / "other.png", "a different page", shade=40)
    state = screenshot_states[1]
    return state, dict(state, screenshot=str(other))


def test_sft_loss_depends_on_the_screenshot(released_checkpoint, two_screens):
    model, processor = load_model({"path": str(released_checkpoint)})
    collate = SFTCollator(processor, PROMPT, loss_on="assistant")
    losses = []
    for state in two_screens:
        batch = collate([state])
        batch["step_tokens"] = {k: float(v) for k, v in batch["loss_tokens"].items()}
        with torch.no_grad():
            losses.append(float(sft_loss(model, batch)[0]))
    assert all(math.isfinite(x) for x in losses) and abs(losses[0] - losses[1]) > 1e-4


def test_salvage_ds_prompt_ids_and_training_forward_carry_the_image(released_checkpoint, two_screens):
    model, processor = load_model({"path": str(released_checkpoint)})
    prepared = prepare_states(list(two_screens), processor, PROMPT)
    image_pad = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    # 320x200 is under the released minimum of 65,536 pixels: resized to 352x224, 22 x 14 patches, 11 x 7 tokens
    assert prepared[0].prompt_ids.count(image_pad) == 77
    logps = []
    for state in prepared:
        vision = vision_inputs([state.row], PROMPT, processor)
        assert vision["image_grid_thw"].tolist() == [[1, 14, 22]]
        with torch.no_grad():
            logits, targets, mask = continuation_logits(
                model,
                [state.prompt_ids],
                [state.reply_ids],
                processor.tokenizer.pad_token_id,
                vision,
                image_pad,
            )
        logps.append(float((token_logprobs(logits, targets) * mask).sum()))
    assert abs(logps[0] - logps[1]) > 1e-4


def test_lora_sft_then_salvage_ds_with_screenshots_and_the_adapter_disabled_reference(
    tmp_path, released_checkpoint, screenshot_states
):
    from rmsweb_kedro.training.sft import SFTConfig, run_sft

    lora = {"r": 4, "alpha": 8, "dropout": 0.0}
    model, processor = load_model({"path": str(released_checkpoint), "lora": lora})
    loop = {"max_steps": 2, "batch_size": 2, "warmup_steps": 0, "eval_every": 0, "progress": False}
    sft = SFTConfig(prompt=PROMPT, loop={"output_dir": str(tmp_path / "sft"), "learning_rate": 1e-2, **loop})
    policy = run_sft(model, processor, screenshot_states[:4], [], sft).model
    assert hasattr(policy, "disable_adapter")  # the adapter is kept, not merged away

    # grpo accepts every group, so the rollout has accepted rows whose pi_ref log-probs it computes
    algorithm = SalvageDSParams(mode="grpo", group_size=4, max_new_tokens=6, beta=0.1)
    step = SalvageDSStep(algorithm, processor, PROMPT, reference_model=None)
    with torch.no_grad():
        batch = step.rollout(policy, {"states": prepare_states(screenshot_states[:2], processor, PROMPT)})
    assert batch["n_accepted"] == 8 and batch["pixel_values"].shape[0] == 308 * 8  # one screenshot a row
    # pi_ref is the base model: the log-probs of the checkpoint loaded afresh, without any adapter
    base, _ = load_model({"path": str(released_checkpoint)})
    vision = {k: batch[k] for k in ("pixel_values", "image_grid_thw")}
    image_pad = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    with torch.no_grad():
        logits, targets, _ = continuation_logits(
            base, batch["prompts"], batch["replies"], processor.tokenizer.pad_token_id, vision, image_pad
        )
    assert torch.allclose(
        batch["ref_logp"], token_logprobs(logits, targets, algorithm.temperature), atol=1e-5
    )

    rl = LoopConfig(output_dir=str(tmp_path / "rl"), learning_rate=1e-3, **loop)
    result = train_salvage_ds(policy, processor, screenshot_states[:4], algorithm, rl, PROMPT)
    assert result.step == 2 and all(math.isfinite(row["train/loss"]) for row in result.history)
    assert all(row["train/completion_tokens"] > 0 for row in result.history)
    assert hasattr(result.model, "disable_adapter")


def test_the_sampler_of_mining_evaluation_and_live_sees_the_image(released_checkpoint, two_screens):
    from rmsweb_kedro.agents.hf_policy import sample_replies

    model, processor = load_model({"path": str(released_checkpoint)})
    firsts = []
    for state in two_screens:
        ((sample,),) = sample_replies(model, processor, [state], PROMPT, 1, greedy=True, max_new_tokens=2)
        firsts.append(sample.logprobs[0])
    assert abs(firsts[0] - firsts[1]) > 1e-4


@pytest.mark.slow
@pytest.mark.browser
def test_evaluate_online_shows_the_page_screenshot_to_the_model(released_checkpoint, sandbox_task_list):
    """evaluate's online stage in the real sandbox and Chromium, one decision on a task's first page, with the
    screenshot and the tree, then with the tree alone: the screenshot adds exactly the 1280x800 page's 1,000 visual
    tokens (80 x 50 patches of 16 pixels merged 2x2) and its vision start/end marks to the policy's prompt."""
    from rmsweb_kedro.contracts.schema import tasks_to_frame
    from rmsweb_kedro.pipelines.evaluate.nodes import run_online

    task = min((t for t in sandbox_task_list if t.split == "test"), key=lambda t: t.id)
    model = load_model({"path": str(released_checkpoint)})
    prompt_tokens = {}
    for name, observation in (("screenshot", ["screenshot", "axtree"]), ("tree", ["axtree"])):
        params = {
            "policy": {"prompt": {"observation": observation, "history_k": 1}, "max_new_tokens": 4},
            "online": {
                "max_tasks": 1,
                "max_held_out_tasks": 0,
                "runs": 1,
                "max_steps": 1,
                "held_out_sites": [],
                "keep_screenshots": False,
            },
        }
        (episode,) = run_online(tasks_to_frame([task]), model, params, name)[0].to_dicts()
        assert episode["n_steps"] == 1, episode
        prompt_tokens[name] = episode["prompt_tokens"]
    assert prompt_tokens["screenshot"] - prompt_tokens["tree"] == 1000 + 2
