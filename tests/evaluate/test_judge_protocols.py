"""The public judges follow their benchmarks' published evaluation code, checked on the real HTTP requests a local
OpenAI-compatible server receives: message roles, which images in which encoding, what the judge is and is not
shown, how replies are read, the no-image variant, and both prompt sources.

The official prompt files are fetched by ``tasks.benchmarks download`` and never committed; the "official" source is
tested with a stand-in file of the same shape (the same functions and variable names, the project's own texts)
pinned by its own digest, which exercises the same reading code.
"""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path

import pytest
from PIL import Image

from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.contracts.schema import Step, Task
from rmsweb_kedro.judges.llm import (
    WebJudge,
    WebVoyagerJudge,
    parse_image_reply,
    parse_key_points,
    parse_status,
)
from rmsweb_kedro.judges.prompts import (
    OFFICIAL_KEYS,
    PROMPT_FILES,
    WEBJUDGE,
    WEBVOYAGER,
    PromptFile,
    load_prompts,
    string_constants,
)
from rmsweb_kedro.models.endpoint import ChatEndpoint, EndpointConfig

TASK = Task(
    id="t1", source="online_mind2web", site="shop", start_url="http://shop.sandbox.test/",
    instruction="Find the cheapest blue scarf",
)  # fmt: skip
STEPS = [
    Step(index=0, url="http://shop.sandbox.test/", axtree='textbox "Search" [1]',
         action=parse_action('type(1, "blue scarf", submit=true)'), thought="search"),
    Step(index=1, url="http://shop.sandbox.test/s", raw_output="gibberish", error="unparseable output: x"),
    Step(index=2, url="http://shop.sandbox.test/s", axtree='link "Sort by price" [4]',
         action=parse_action("click(4)"), thought="sort"),
    Step(index=3, url="http://shop.sandbox.test/s?sort=price", action=parse_action('answer("Blue scarf, $9")')),
]  # fmt: skip
FACTUAL = ['type(1, "blue scarf", submit=true) on textbox "Search"', 'click(4) on link "Sort by price"']


@pytest.fixture
def pages(tmp_path) -> list[str]:
    paths = []
    for i, colour in enumerate(["red", "green", "blue"]):
        path = tmp_path / f"step_{i:03d}.png"
        Image.new("RGBA", (64, 40), colour).save(path)
        paths.append(str(path))
    return paths


def endpoint(server) -> ChatEndpoint:
    return ChatEndpoint(EndpointConfig(base_url=server.base_url, model="judge-test", max_retries=0))


def image_urls(message: dict) -> list[dict]:
    return [p["image_url"] for p in message["content"] if p["type"] == "image_url"]


def official_stand_in(folder: Path, protocol: str) -> PromptFile:
    """A file shaped like the benchmark's evaluation source (same functions and names), with marked texts."""
    pinned = next(f for f in PROMPT_FILES if f.protocol == protocol)
    if protocol == WEBJUDGE:
        source = '''
async def identify_key_points(task, model):
    system_msg = """OFFICIAL key points. Reply with **Key Points**: a list."""
    prompt = """OFFICIAL Task: {task}"""

async def judge_image(task, image_path, key_points, model):
    system_msg = """OFFICIAL image. Reply **Reasoning** then **Score**."""
    prompt = """OFFICIAL {task} / {key_points}"""

async def WebJudge_Online_Mind2Web_eval(task, last_actions, images_path, model, score_threshold):
    system_msg = 'OFFICIAL outcome. Status: "success" or "failure"'
    prompt = """OFFICIAL {task} | {key_points} | {last_actions} | {thoughts}"""
    if not images_path:
        prompt = """OFFICIAL NO IMAGES {task} | {key_points} | {last_actions}"""
'''
    else:
        source = '''
SYSTEM_PROMPT = """OFFICIAL judge: say 'SUCCESS' or 'NOT SUCCESS'."""
USER_PROMPT = """OFFICIAL <task> | <answer> | <num>"""

def auto_eval_by_gpt4v(process_dir, openai_client, api_model, img_num):
    content = [{'type': 'text', 'text': "OFFICIAL verdict:"}]
'''
    path = folder / pinned.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return PromptFile(pinned.name, pinned.url, digest, protocol=protocol)


# ---------------------------------------------------------------- WebJudge


def test_webjudge_roles_images_and_what_the_judge_is_shown(chat_server, pages):
    chat_server.replies = [
        "**Key Points**:\n\n  1. blue scarf\n  2. sort by lowest price",
        "**Reasoning**: the home page.\n\n**Score**: 2",
        "**Reasoning**: search results\nfor scarves.\n\nmore\n**Score**: 4",
        "**Reasoning**: sorted by price.\n\n**Score**: 5",
        'Thoughts: sorted and found.\nStatus: "success"',
    ]
    judge = WebJudge(endpoint(chat_server), official_prompts=None)
    verdict, usage = judge.judge(TASK, STEPS, "Blue scarf, $9", {"screenshots": pages})
    assert verdict.success and usage.prompt_tokens == 5 * 100
    requests = chat_server.requests
    assert len(requests) == 1 + len(pages) + 1
    # Every call: a system message and one user message; at most 512 tokens (the benchmark client's default).
    assert all([m["role"] for m in r["messages"]] == ["system", "user"] for r in requests)
    assert all(r["max_tokens"] == 512 and r["temperature"] == 0 for r in requests)
    key_points = requests[0]["messages"][1]["content"]
    assert [p["type"] for p in key_points] == ["text"] and key_points[0][
        "text"
    ] == f"Task: {TASK.instruction}"
    # Stage 2: one page per call, JPEG at detail "high", with the parsed key points.
    for request, page in zip(requests[1:-1], pages, strict=True):
        (url,) = image_urls(request["messages"][1])
        assert url["detail"] == "high" and url["url"].startswith("data:image/jpeg;base64,")
        decoded = Image.open(io.BytesIO(base64.b64decode(url["url"].split(",", 1)[1])))
        assert decoded.format == "JPEG" and decoded.size == Image.open(page).size
        assert "1. blue scarf\n2. sort by lowest price" in request["messages"][1]["content"][0]["text"]
    # Stage 3: the pages scoring >= 3 in order, named image/png as the benchmark's code does; their reasons;
    # the factual actions only (no answer, no unparsed output) and never the final answer.
    outcome = requests[-1]["messages"][1]
    assert [u["url"][:22] for u in image_urls(outcome)] == ["data:image/png;base64,"] * 2
    shown = outcome["content"][0]["text"]
    assert f"1. {FACTUAL[0]}\n2. {FACTUAL[1]}" in shown
    assert "1. search results for scarves.\n2. sorted by price." in shown
    assert "Blue scarf, $9" not in shown and "gibberish" not in shown and "answer(" not in shown
    assert verdict.details["kept"] == ["step_001.png", "step_002.png"]
    assert [s["score"] for s in verdict.details["scores"]] == [2, 4, 5]
    assert verdict.judged_by.prompt_source == "project" and verdict.judge.startswith(
        "webjudge/judge-test/project-"
    )


def test_webjudge_keeps_the_first_images_and_has_a_no_image_variant(chat_server, pages):
    chat_server.replies = (
        ["Key Points: 1. x"] + ["**Reasoning**: yes\n\n**Score**: 5"] * 3 + ["Status: success"]
    )
    judge = WebJudge(endpoint(chat_server), max_images=2, official_prompts=None)
    verdict, _ = judge.judge(TASK, STEPS, None, {"screenshots": pages})
    outcome = chat_server.requests[-1]["messages"][1]
    assert len(image_urls(outcome)) == 2 and verdict.details["kept"] == ["step_000.png", "step_001.png"]
    first_two = [chat_server.requests[i]["messages"][1]["content"][1]["image_url"]["url"] for i in (1, 2)]
    assert [u.split(",", 1)[1] for u in first_two] == [u["url"].split(",", 1)[1] for u in image_urls(outcome)]

    chat_server.requests.clear()
    chat_server.replies = (
        ["Key Points: 1. x"] + ["**Reasoning**: no\n\n**Score**: 1"] * 3 + ["Status: failure"]
    )
    verdict, _ = judge.judge(TASK, STEPS, None, {"screenshots": pages})
    outcome = chat_server.requests[-1]["messages"][1]
    assert image_urls(outcome) == [] and not verdict.success
    assert outcome["content"][0]["text"] == judge.prompts["outcome_user_no_images"].format(
        task=TASK.instruction, key_points="1. x", last_actions=f"1. {FACTUAL[0]}\n2. {FACTUAL[1]}"
    )


def test_webjudge_reply_parsing_follows_the_benchmark():
    assert parse_key_points("**Key Points**:\n\n   1. a\n   2. b") == "\n1. a\n2. b"
    assert parse_key_points("Here.\nKey Points: 1. a") == "1. a"
    assert parse_image_reply("**Reasoning**: shows\nthe cart.\n\nDone.\n**Score**: 4") == (
        4,
        "shows the cart.",
    )
    assert parse_image_reply("Score: none given")[0] == 0 and parse_image_reply("no score")[0] == 0
    assert parse_image_reply("**Score**: 7 then 3")[0] == 3  # the first digit 1-5 after "Score"
    assert parse_status('Thoughts: ok\nStatus: "success"') is True
    assert parse_status("STATUS: Failure") is False
    assert parse_status("Thoughts: it is a success") is None  # no "status:": the benchmark scores 0


def test_unparseable_outcome_is_a_recorded_failure(chat_server, pages):
    chat_server.replies = ["Key Points: 1. x", "Score: 1", "Score: 1", "Score: 1", "It worked."]
    verdict, _ = WebJudge(endpoint(chat_server), official_prompts=None).judge(
        TASK, STEPS, None, {"screenshots": pages}
    )
    assert (
        not verdict.success
        and verdict.reason == "judge reply unparseable"
        and "Status" in verdict.details["error"]
    )


# ---------------------------------------------------------------- WebVoyager


def test_webvoyager_roles_last_images_and_verdict_words(chat_server, tmp_path):
    shots = []
    for i in range(18):
        path = tmp_path / f"s{i:02d}.png"
        Image.new("RGB", (32, 20), (i * 10, 0, 0)).save(path)
        shots.append(str(path))
    judge = WebVoyagerJudge(endpoint(chat_server), official_prompts=None)
    chat_server.replies = ["All shown. SUCCESS"]
    verdict, _ = judge.judge(TASK, STEPS, "Blue scarf, $9", {"screenshots": shots})
    (request,) = chat_server.requests
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["max_tokens"] == 1000 and verdict.success
    content = request["messages"][1]["content"]
    assert [p["type"] for p in content] == ["text"] + ["image_url"] * 15 + ["text"]
    assert content[-1]["text"] == judge.prompts["closing"]
    # The last 15 pages, the PNG bytes as they are, no "detail".
    sent = [
        base64.b64decode(p["image_url"]["url"].removeprefix("data:image/png;base64,")) for p in content[1:-1]
    ]
    assert sent == [Path(p).read_bytes() for p in shots[-15:]]
    assert all("detail" not in p["image_url"] for p in content[1:-1])
    assert TASK.instruction in content[0]["text"] and "Blue scarf, $9" in content[0]["text"]

    chat_server.replies = ["Not quite: NOT SUCCESS", "I cannot tell."]
    assert not judge.judge(TASK, STEPS, "x", {"screenshots": shots})[0].success
    unparsed, _ = judge.judge(TASK, STEPS, "x", {"screenshots": shots})
    assert not unparsed.success and "error" in unparsed.details


def test_webvoyager_scores_no_answer_zero_without_asking(chat_server, pages):
    verdict, usage = WebVoyagerJudge(endpoint(chat_server), official_prompts=None).judge(
        TASK, STEPS[:3], None, {"screenshots": pages}
    )
    assert not verdict.success and chat_server.requests == [] and usage.prompt_tokens == 0


# ---------------------------------------------------------------- prompt sources


def test_official_prompts_are_used_verbatim_when_present_and_pinned(chat_server, pages, tmp_path):
    folder = tmp_path / "benchmarks"
    for protocol in (WEBJUDGE, WEBVOYAGER):
        remote = official_stand_in(folder, protocol)
        official = load_prompts(protocol, folder, remote)
        assert official.source == "official" and official.ref == remote.ref
        assert set(official.texts) == set(OFFICIAL_KEYS[protocol])
        assert all(text.startswith("OFFICIAL") for text in official.texts.values())
        # Without the file, or with a file of another digest, the project's wording, never called official.
        assert load_prompts(protocol, tmp_path / "nowhere", remote).source == "project"
        other = PromptFile(remote.name, remote.url, "0" * 64, protocol=protocol)
        assert load_prompts(protocol, folder, other).source == "project"

    judge = WebJudge(endpoint(chat_server), official_prompts=None)
    judge.prompts = load_prompts(WEBJUDGE, folder, official_stand_in(folder, WEBJUDGE))
    chat_server.replies = (
        ["**Key Points**: 1. x"] + ["**Reasoning**: y\n\n**Score**: 3"] * 3 + ["Status: success"]
    )
    verdict, _ = judge.judge(TASK, STEPS, None, {"screenshots": pages})
    systems = [r["messages"][0]["content"] for r in chat_server.requests]
    assert systems[0] == judge.prompts["key_points_system"] and systems[-1] == judge.prompts["outcome_system"]
    assert (
        chat_server.requests[0]["messages"][1]["content"][0]["text"] == f"OFFICIAL Task: {TASK.instruction}"
    )
    spec = verdict.judged_by
    assert spec.prompt_source == "official" and spec.official and spec.prompt_sha256 == judge.prompts.sha256


def test_string_constants_reads_assignments_and_text_parts_without_running():
    source = 'X = "a"\nraise SystemExit\ndef f():\n    p = "b"\n    p = "c"\n    m = [{"type": "text", "text": "d"}]\n'
    assert string_constants(source) == {"X": "a", "f.p": "b", "f.p#2": "c", "f.text": "d"}


def test_the_prompt_pins_name_public_commits():
    for remote in PROMPT_FILES:
        assert remote.name.startswith("prompts/") and len(remote.sha256) == 64
        repo, rest = remote.ref.split("@")
        commit, path = rest.split(":", 1)
        assert (
            repo in ("microsoft/fara", "MinorJerry/WebVoyager") and len(commit) == 40 and path.endswith(".py")
        )
    assert {f.protocol for f in PROMPT_FILES} == set(OFFICIAL_KEYS)
