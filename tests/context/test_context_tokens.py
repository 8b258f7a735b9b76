"""Trained and sampled prompts are the same tokens, on a real multi-step episode (sandbox server, Chromium).

The scripted teacher solves a recipe comparison (7 steps, one of them a ``memorize`` of the first recipe's
calories) while a recorder keeps, at every step, the state the live policy builds (``prompts.state_from_live``:
what ``HFPolicy.act`` and ``OpenAIPolicy.act`` render). The recorded trajectory then goes the training way: a raw
file, ingest, shortening, ``sft_data``'s states. For each step and each context policy, the ids of

- SFT's sample (``SFTCollator``: the state with its reference reply) up to its first supervised token,
- the in-process policy's prompt (``HFPolicy.sample``'s ``prompt_ids``, from the generation prompt), and
- what vLLM's chat-completions endpoint reports it tokenized for ``OpenAIPolicy``'s request (``return_token_ids``:
  the same messages, screenshots as base64 ``image_url`` parts)

are one list. The policy is a tiny Qwen3-VL (head_dim 32, what vLLM's CPU attention takes) whose tokenizer was
trained on the episode's prompts; its weights are random: only the prompt is compared.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.agents.scripted import ScriptedTeacher, TeacherImperfections
from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages, state_from_live
from rmsweb_kedro.episodes.episode import run_episode
from rmsweb_kedro.judges.sandbox import SandboxJudge

pytestmark = pytest.mark.browser

PERFECT = TeacherImperfections(mistake_probs={}, self_correct_prob=0.0)
_CALORIES = re.compile(r"(\d+) calories per serving")
#: The embedded default's prompt (conf/base/globals.yml) and Fara-7B's context (conf/production/globals.yml) at
#: the tiny model's page budget: every past thought and action, the 3 latest screenshots, the URL, the facts.
CONTEXTS = {
    "default": PromptConfig(observation=["axtree"], history_k=3, include_thought=False, system_turn=False),
    "fara": PromptConfig(
        observation=["screenshot", "axtree"], history_k="all", history_thoughts="all", history_screenshots=3,
        memory=True, history_max_tokens=1024,
    ),
}  # fmt: skip
MODE = "reflection_retries"


class Recorder:
    """The scripted teacher, plus one ``memorize`` of the calories on the first recipe page it opens; keeps the
    live state of every step (what a policy acting here would render)."""

    def __init__(self, teacher: ScriptedTeacher):
        self.teacher, self.name = teacher, teacher.name
        self.states: list[dict] = []
        self.fact: str | None = None

    def act(self, task, observation, history, reflections) -> Decision:
        self.states.append(state_from_live(task, observation, history, reflections))
        memorized = [s for s in history if s.action is not None and s.action.type is ActionType.MEMORIZE]
        found = _CALORIES.search(observation.axtree or "")
        if found and not memorized:
            self.fact = f"The {observation.title.split(' - ')[0]} has {found.group(1)} calories per serving"
            return Decision(Action(type="memorize", text=self.fact), thought="Remember its calories.")
        own = [s for s in history if s not in memorized]  # the teacher's plan counts its own steps
        return self.teacher.act(task, observation, own, reflections)


@pytest.fixture(scope="module")
def episode(sandbox_task_list, sandbox_server, browser_env, tmp_path_factory):
    """``(live states, sft_data's states of the recorded trajectory, raw root, the memorized fact)``."""

    from rmsweb_kedro.datasets.raw_trajectories import RawTrajectoriesDataset
    from rmsweb_kedro.pipelines.sft_data.nodes import build_states
    from rmsweb_kedro.pipelines.trajectories.nodes import shorten_trajectories, validate_trajectories

    task = next(
        t for t in sandbox_task_list if t.metadata["template"] == "recipe_compare" and t.split == "train"
    )
    raw = tmp_path_factory.mktemp("raw")
    name = f"{task.id}__a1"
    recorder = Recorder(ScriptedTeacher(0, PERFECT))
    trajectory = run_episode(
        browser_env, task, recorder, SandboxJudge(sandbox_server.session_state), max_steps=20,
        screenshot_dir=raw / MODE / name, relative_to=raw / MODE,
    )  # fmt: skip
    assert trajectory.success is True and len(trajectory.steps) == len(task.reference_solution) + 1
    (raw / MODE / f"{name}.jsonl").write_text(trajectory.model_dump_json() + "\n")
    files = RawTrajectoriesDataset(path=str(raw), dataset="text.TextDataset", filename_suffix=".jsonl").load()
    trajectories, steps, quarantine, _ = validate_trajectories(files, {"raw_root": str(raw)})
    assert quarantine.height == 0
    states = build_states(*shorten_trajectories(trajectories, steps))
    assert states.height == len(recorder.states) == 7  # nothing was a detour, the memorize step included
    return recorder.states, states.sort("step_index").to_dicts(), raw, recorder.fact


@pytest.fixture(scope="module")
def checkpoint(episode, tmp_path_factory) -> Path:
    """A tiny Qwen3-VL (the default architecture: head_dim 32, 2,048 positions) whose tokenizer was trained on the
    episode's prompts under both contexts, saved as a checkpoint directory."""
    from rmsweb_kedro.models.modeling import build_tiny_model, save_checkpoint

    live, _, _, _ = episode
    corpus = [
        part["text"]
        for config in CONTEXTS.values()
        for state in live
        for message in build_messages(state, config)[0]
        for part in message["content"]
        if part["type"] == "text"
    ]
    model, processor = build_tiny_model(corpus, {"vocab_size": 1024})
    path = tmp_path_factory.mktemp("context_checkpoint") / "model"
    save_checkpoint(model, processor, path)
    return path


def sft_prompt_ids(processor, state: dict, config: PromptConfig) -> list[int]:
    """The ids of SFT's sample for ``state`` before its first supervised token, checking the rest is the reply."""
    from rmsweb_kedro.training.sft import IGNORE_INDEX, SFTCollator

    batch = SFTCollator(processor, config, loss_on="assistant")([state])
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    first = next(i for i, label in enumerate(labels) if label != IGNORE_INDEX)
    reply = processor.tokenizer.decode(ids[first:], skip_special_tokens=True).strip()
    assert reply.endswith(state["reference_action"]), reply
    return ids[:first]


def with_image_root(config: PromptConfig, raw: Path) -> PromptConfig:
    """The training side reads screenshots relative to the raw folder (as production's ``image_root``)."""
    return config.model_copy(update={"image_root": str(raw)})


@pytest.mark.slow
@pytest.mark.parametrize("context", CONTEXTS)
def test_the_trained_prompt_is_the_in_process_policys_prompt_token_for_token(context, episode, checkpoint):
    from rmsweb_kedro.agents.hf_policy import HFPolicy

    live, trained, raw, fact = episode
    config = CONTEXTS[context]
    policy = HFPolicy.from_pretrained(
        checkpoint, prompt=config, dtype="float32", device="cpu", max_new_tokens=2
    )
    sampled = [group[0].prompt_ids for group in policy.sample(live, n=1, logprobs=False)]
    for step, (state, ids) in enumerate(zip(trained, sampled, strict=True)):
        assert sft_prompt_ids(policy.processor, state, with_image_root(config, raw)) == ids, (context, step)
    tokenizer = policy.processor.tokenizer
    last = tokenizer.decode(sampled[-1])
    if context == "fara":  # what the context keeps reached the tokens: the fact, the thoughts, 3 + 1 images
        number = 1 + trained[-1]["previous_actions"].index(f'memorize("{fact}")')
        assert (
            f"Memory:\n- {fact}\n" in last
            and f"{number}. Thought: Remember its calories. Action: memorize(" in last
        )
        image = tokenizer.convert_tokens_to_ids("<|vision_start|>")
        assert sampled[-1].count(image) == 4 and sampled[1].count(image) == 2
    else:
        assert "Previous actions: " in last and "Thought" not in last and "<|vision_start|>" not in last


@pytest.mark.slow
def test_the_served_policy_prompt_is_the_same_tokens(episode, checkpoint, tmp_path):
    """vLLM renders ``OpenAIPolicy``'s messages (chat template, image placeholders expanded) to the ids SFT trained
    on, for every step under both contexts; one server for both."""
    from rmsweb_kedro.agents.hf_policy import HFPolicy
    from rmsweb_kedro.agents.openai_policy import OpenAIPolicy
    from rmsweb_kedro.models.endpoint import ChatEndpoint, EndpointConfig
    from rmsweb_kedro.models.serving import VLLMServer
    from tests.salvage_ds.test_served import server_config

    live, trained, raw, _ = episode
    local = HFPolicy.from_pretrained(checkpoint, dtype="float32", device="cpu")
    with VLLMServer(server_config(max_model_len=2048), checkpoint, tmp_path / "vllm.log") as server:
        server.start()
        endpoint = ChatEndpoint(
            EndpointConfig(
                base_url=server.base_url, model=server.config.model, api_key=server.api_key, api_key_env=None,
                extra_body={"return_token_ids": True}, timeout_s=120, max_retries=0,
            )
        )  # fmt: skip
        for context, config in CONTEXTS.items():
            served = OpenAIPolicy(endpoint, config, tokenizer=local.processor.tokenizer, max_new_tokens=2)
            for step, (state, group) in enumerate(zip(trained, served.sample(live, n=1), strict=True)):
                assert not group[0].fatal, group[0].error
                expected = sft_prompt_ids(local.processor, state, with_image_root(config, raw))
                assert group[0].prompt_ids == expected, (context, step, json.dumps(state["previous_actions"]))
