"""A served model's reply is arbitrary text: whatever it holds ends as a parse error with a reason, never an
exception, in the parser and through the whole served path (the local OpenAI-compatible server sends the text as
JSON, the policy parses it, scoring stores it)."""

from __future__ import annotations

import pytest

from rmsweb_kedro.agents.factory import build_policy
from rmsweb_kedro.contracts.actions import MAX_REPLY_CHARS, ActionParseError, parse_action, parse_reply
from rmsweb_kedro.measures.scoring import ScoringConfig, score_states
from tests.collect.local_openai_server import LocalChatServer

LONE_SURROGATE = 'Action: type(1, "caf\udcff")'  # what json.loads makes of a "\udcff" escape
NUL = "Thought: ok\nAction: click(\x001)"
LONG = 'Action: type(1, "' + "x" * 100_000 + '")'


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (LONE_SURROGATE, r"lone surrogate '\\udcff' at position 20"),
        (NUL, "NUL character at position 26"),
        ("Action: click(1)\x00", "NUL character at position 16"),
        (LONG, "reply of 100019 characters is longer than the 16000"),
        ("click(" + "-" * 10_000 + "1)", r"nest too deeply to parse"),
        ("click(1" + "+1" * 7_000 + ")", r"nest too deeply to parse"),
    ],
)
def test_unparseable_text_is_a_parse_error_with_a_reason(text, reason):
    with pytest.raises(ActionParseError, match=reason):
        parse_reply(text)


@pytest.mark.parametrize(
    "text",
    [
        " \n" * (MAX_REPLY_CHARS // 2 - 1) + "x",  # blank lines: no quadratic search for an Action: line
        "Thought: " + " \n" * (MAX_REPLY_CHARS // 2 - 10) + "x",
        "```\n" + "\n" * (MAX_REPLY_CHARS - 10) + "x",  # an unclosed code fence over many lines
        "a" + " " * (MAX_REPLY_CHARS - 2) + "b(",  # a name that never ends
    ],
)
def test_long_layouts_are_parse_errors(text):
    # each took minutes before the line-start patterns stopped matching newlines (quadratic searches)
    with pytest.raises(ActionParseError):
        parse_action(text)


def test_layout_tolerance_is_kept():
    assert str(parse_action("```python\n\n  click(3)\n\n```")) == "click(3)"
    assert parse_reply("Thought:  the  box \n\n  Action: click(5)") == ("the box", parse_action("click(5)"))


def test_served_replies_end_as_parse_errors_in_the_scored_table(tiny_states):
    replies = [
        LONE_SURROGATE,
        NUL,
        LONG,
        "Thought: the search box\nAction: " + tiny_states[0]["reference_action"],
    ]
    with LocalChatServer() as server:  # answers with exactly these texts, JSON-escaped as any server would
        server.replies = list(replies)
        endpoint = {"base_url": server.base_url, "model": "m", "max_retries": 0}
        policy = build_policy({"kind": "openai", "endpoint": endpoint, "batch_size": 1})  # requests in order
        states = [tiny_states[0]] * 4
        scored = score_states(states, policy, ScoringConfig(batch_size=4))
    errors = scored["parse_error"].to_list()
    assert (
        "lone surrogate" in errors[0] and "NUL character" in errors[1] and "characters is longer" in errors[2]
    )
    assert errors[3] is None and scored["step_success"].to_list() == [False, False, False, True]
    assert scored["failure_mode"].to_list()[:3] == ["invalid_format"] * 3
    assert scored["reply"][0] == 'Action: type(1, "caf\\udcff")'  # kept printable: the table can be stored


def test_a_served_policy_travels_by_pickle(tiny_states):
    """Ray ships the agent to its browser actors by pickle: the endpoint's HTTP client is rebuilt on arrival."""
    import pickle

    with LocalChatServer() as server:
        server.respond = lambda body: "Action: click(2)"
        endpoint = {"base_url": server.base_url, "model": "m", "max_retries": 0}
        policy = pickle.loads(pickle.dumps(build_policy({"kind": "openai", "endpoint": endpoint})))
        ((sample,),) = policy.sample(tiny_states[:1], n=1)
    assert str(sample.action) == "click(2)" and len(server.requests) == 1
