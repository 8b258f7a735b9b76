"""The OpenAI-compatible teacher, reflector and judges against a real local HTTP server speaking the protocol
(the shared tiny Qwen3-VL checkpoint's generate behind it), including its failures: a 500, a hang past the
timeout, and the tiny untrained model's unparseable replies."""

from __future__ import annotations

import pytest
from PIL import Image

from rmsweb_kedro.agents.openai_roles import OpenAIReflector, OpenAITeacher
from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.contracts.schema import Observation, Step, Task, Verdict
from rmsweb_kedro.judges.llm import WebJudge, WebVoyagerJudge
from rmsweb_kedro.models.endpoint import (
    ChatEndpoint,
    EndpointConfig,
    EndpointError,
    endpoint_credentials,
    resolve_api_key,
)
from tests.collect.local_openai_server import LocalChatServer


@pytest.fixture(scope="module")
def chat_server(tiny_checkpoint):
    with LocalChatServer(tiny_checkpoint) as server:
        yield server


@pytest.fixture
def screenshots(tmp_path):
    paths = []
    for i, colour in enumerate(["red", "green", "blue"]):
        path = tmp_path / f"step_{i:03d}.png"
        Image.new("RGB", (96, 64), colour).save(path)
        paths.append(str(path))
    return paths


def endpoint(server: LocalChatServer, **overrides) -> ChatEndpoint:
    config = {
        "base_url": server.base_url,
        "model": server.model_name,
        "max_tokens": 12,
        "backoff_s": 0.01,
        "max_retries": 2,
        "price_prompt_per_million": 2.0,
        "price_completion_per_million": 8.0,
        **overrides,
    }
    return ChatEndpoint(EndpointConfig(**config))


TASK = Task(
    id="t1", source="user", site="shop", start_url="http://shop.sandbox.test/", instruction="Buy a blue scarf"
)


def observation(screenshot: str) -> Observation:
    return Observation(
        url="http://shop.sandbox.test/", title="Shop", axtree='textbox "Search" [1]', screenshot=screenshot
    )


def test_teacher_sends_screenshot_and_records_unparseable_reply(chat_server, screenshots):
    chat_server.faults = {}
    teacher = OpenAITeacher(endpoint(chat_server))
    decision = teacher.act(TASK, observation(screenshots[0]), [], ["Use the search box first."])
    sent = chat_server.requests[-1]["messages"][1]["content"]
    assert [p["type"] for p in sent] == ["text", "image_url"]
    assert sent[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert "Use the search box first." in sent[0]["text"] and 'textbox "Search" [1]' in sent[0]["text"]
    # The untrained tiny model writes no action: the decision keeps its text and says why, and is not fatal.
    assert decision.action is None and not decision.fatal
    assert decision.error.startswith("unparseable output")
    assert decision.raw_output and decision.usage.prompt_tokens > 0 and decision.usage.completion_tokens > 0
    expected = (decision.usage.prompt_tokens * 2.0 + decision.usage.completion_tokens * 8.0) / 1e6
    assert decision.cost_usd == pytest.approx(expected)


def test_the_teacher_carries_every_fact_it_memorized():
    """A fact memorized long before the last ``history_limit`` actions is still in the prompt; the system turn
    offers ``memorize``."""
    from rmsweb_kedro.agents.openai_roles import TEACHER_SYSTEM

    teacher = OpenAITeacher(
        ChatEndpoint(EndpointConfig(base_url="http://127.0.0.1:9/v1", model="m")), history_limit=2
    )
    actions = ['memorize("the red scarf is 12 EUR")', "click(4)", "go_back()", "click(5)"]
    history = [Step(index=i, url="http://shop.sandbox.test/", action=a) for i, a in enumerate(actions)]
    text = teacher.messages(TASK, observation(""), history, [])[1]["content"][0]["text"]
    assert "Facts you memorized:\n- the red scarf is 12 EUR\nPrevious actions:" in text
    assert "memorize(" not in text.split("Previous actions:")[1]  # the action itself is out of the last 2
    assert 'memorize("fact")' in TEACHER_SYSTEM and teacher.name == "openai-teacher/m/v2"
    assert (
        "Facts you memorized"
        not in teacher.messages(TASK, observation(""), history[1:], [])[1]["content"][0]["text"]
    )


def test_500s_are_retried_then_answered(chat_server):
    chat_server.faults = {"status_500": 2}
    completion = endpoint(chat_server).complete([{"role": "user", "content": "hello"}])
    assert completion.failures == [f for f in completion.failures if f.startswith("HTTP 500")]
    assert len(completion.failures) == 2 and completion.usage.completion_tokens > 0


def test_persistent_500_ends_in_a_fatal_decision(chat_server, screenshots):
    chat_server.faults = {"status_500": 3}
    decision = OpenAITeacher(endpoint(chat_server)).act(TASK, observation(screenshots[0]), [], [])
    assert decision.fatal and decision.action is None and "HTTP 500" in decision.error
    chat_server.faults = {}


@pytest.mark.slow
def test_timeout_is_retried(chat_server):
    chat_server.faults = {"hangs": 1, "hang_s": 8.0}
    # Generous for the answered retry on a loaded machine; the hung request outlasts it anyway.
    completion = endpoint(chat_server, timeout_s=5.0, max_tokens=2).complete(
        [{"role": "user", "content": "hello"}]
    )
    assert len(completion.failures) == 1 and "Timeout" in completion.failures[0]
    assert completion.text is not None and completion.usage.prompt_tokens > 0


def test_client_errors_are_not_retried(chat_server):
    config = EndpointConfig(
        base_url=chat_server.base_url.removesuffix("/v1") + "/nowhere", model="m", max_retries=3
    )
    with pytest.raises(EndpointError) as caught:
        ChatEndpoint(config).complete([{"role": "user", "content": "hello"}])
    assert len(caught.value.failures) == 1 and "HTTP 404" in caught.value.failures[0]


def test_api_key_from_kedro_credentials():
    credentials = endpoint_credentials({"teacher_endpoint": {"api_key": "sk-local-123"}})
    config = EndpointConfig(base_url="http://127.0.0.1:1/v1", model="m", credentials="teacher_endpoint")
    assert resolve_api_key(config, credentials).get_secret_value() == "sk-local-123"
    assert ChatEndpoint(config, credentials)._client.api_key == "sk-local-123"
    with pytest.raises(KeyError, match=r"no entry 'other: \{api_key"):
        resolve_api_key(config.model_copy(update={"credentials": "other"}), credentials)


STEPS = [
    Step(index=0, url="http://shop.sandbox.test/", action=parse_action('type(1, "blue scarf", submit=true)'))
]


def test_webvoyager_judge_records_its_protocol(chat_server, screenshots):
    chat_server.faults = {}
    judge = WebVoyagerJudge(endpoint(chat_server), 2, official_prompts=None, max_tokens=12)
    before = len(chat_server.requests)
    verdict, usage = judge.judge(TASK, STEPS, "done", {"screenshots": screenshots})
    request = chat_server.requests[before]
    assert sum(p["type"] == "image_url" for p in request["messages"][1]["content"]) == 2
    assert (
        verdict.judge.startswith(f"webvoyager/{chat_server.model_name}/project-") and usage.prompt_tokens > 0
    )
    spec = verdict.judged_by
    assert spec.protocol == "webvoyager/auto-eval" and spec.thresholds == {"max_attached_imgs": 2}
    # The tiny model says neither SUCCESS nor NOT SUCCESS: a failure that says the reply did not parse.
    if "error" in verdict.details:
        assert not verdict.success and verdict.reason == "judge reply unparseable"


def test_webjudge_scores_each_screenshot_then_decides(chat_server, screenshots):
    chat_server.faults = {}
    judge = WebJudge(endpoint(chat_server), score_threshold=3, official_prompts=None, max_tokens=12)
    before = len(chat_server.requests)
    verdict, usage = judge.judge(TASK, STEPS, None, {"screenshots": screenshots})
    assert (
        len(chat_server.requests) - before == 1 + len(screenshots) + 1
    )  # key points, one per image, outcome
    details = verdict.details
    assert verdict.judged_by.protocol == "online-mind2web/webjudge"
    assert verdict.judged_by.thresholds["score_threshold"] == 3
    assert [s["screenshot"] for s in details["scores"]] == ["step_000.png", "step_001.png", "step_002.png"]
    assert set(details["kept"]) <= {s["screenshot"] for s in details["scores"] if s["score"] >= 3}
    outcome = chat_server.requests[-1]["messages"][1]["content"]
    assert 'Action History:\n1. type(1, "blue scarf", submit=true)' in outcome[0]["text"]
    assert usage.prompt_tokens > 0


def test_reflector_returns_text_and_usage(chat_server):
    chat_server.faults = {}
    verdict = Verdict(success=False, reason="wrong size", judge="sandbox-checker/v1")
    text, usage = OpenAIReflector(endpoint(chat_server)).reflect(TASK, STEPS, verdict, None)
    prompt = chat_server.requests[-1]["messages"][0]["content"]
    assert "wrong size" in prompt and 'type(1, "blue scarf", submit=true)' in prompt
    assert isinstance(text, str) and usage.completion_tokens > 0


@pytest.mark.browser
def test_openai_teacher_drives_a_sandbox_episode(
    chat_server, sandbox_task_list, sandbox_server, browser_env, tmp_path
):
    """The endpoint teacher in a real browser episode: every reply is recorded; the untrained model's unparseable
    replies end the attempt as a model error, judged by the checker as a failure."""
    from rmsweb_kedro.episodes.episode import EpisodeSettings, run_episode
    from rmsweb_kedro.judges.sandbox import SandboxJudge

    chat_server.faults = {}
    task = next(t for t in sandbox_task_list if t.split == "train")
    before = len(chat_server.requests)
    trajectory = run_episode(
        browser_env,
        task,
        OpenAITeacher(endpoint(chat_server)),
        SandboxJudge(sandbox_server.session_state),
        max_steps=5,
        settings=EpisodeSettings(max_unparsed=2),
        screenshot_dir=tmp_path / "a1",
        relative_to=tmp_path,
    )
    assert len(chat_server.requests) - before == len(trajectory.steps)
    assert trajectory.termination == "model_error" and trajectory.success is False
    assert all(s.action is None and s.raw_output is not None and s.error for s in trajectory.steps)
    assert trajectory.usage.prompt_tokens > 0 and trajectory.cost_usd > 0
    assert trajectory.producer.startswith("openai-teacher/")
    assert (tmp_path / trajectory.steps[0].screenshot).is_file()
