"""Evaluate-area fixtures: where the shared benchmark files are, and the real local OpenAI-compatible test server
answering as a judge."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.collect.local_openai_server import LocalChatServer

FIXTURES = Path(__file__).parent / "fixtures"
_REPO = Path(__file__).resolve().parents[2]
# $RMSWEB_BENCHMARKS when set, else shared/benchmarks beside the repository (where a clone finds it).
BENCHMARK_DIRS = [Path(p) for p in [os.environ.get("RMSWEB_BENCHMARKS")] if p] + [
    _REPO.parent / "shared" / "benchmarks"
]


@pytest.fixture(scope="session")
def shared_benchmarks() -> Path:
    """The folder of the full public benchmark files, or a skip saying where they were looked for."""
    for folder in BENCHMARK_DIRS:
        if (folder / "SOURCES.md").is_file():
            return folder
    pytest.skip(
        f"the full benchmark files are absent (looked in {', '.join(map(str, BENCHMARK_DIRS))}; "
        "set RMSWEB_BENCHMARKS to their folder)"
    )


def request_text(body: dict) -> str:
    """Every text part of a chat request's messages, joined."""
    parts = []
    for message in body["messages"]:
        content = message["content"]
        parts += [content] if isinstance(content, str) else [p.get("text", "") for p in content]
    return "\n".join(parts)


#: A one-criterion WebTailBench rubric the stand-in judge model awards in full.
RUBRIC = [{"criterion": "Did the task", "description": "", "max_points": 2}]


def judge_model(body: dict) -> str:
    """A stand-in judge model: recognises each judge's stage by the reply format its prompt asks for (the same in
    the official prompts and the project's wording) and approves."""
    text = request_text(body)
    if "NOT SUCCESS" in text:
        return "The screenshots show the task done. SUCCESS"
    if "**Score**" in text:
        return "**Reasoning**: it shows the page.\n\n**Score**: 4"
    if 'Status: "success" or "failure"' in text:
        return 'Thoughts: all key points met.\nStatus: "success"'
    if "**Key Points**" in text:
        return "**Key Points**:\n1. do the task"
    if "grading rubric" in text:
        return '{"items": [{"index": 0, "applicable": true, "earned_points": 2, "justification": "done"}]}'
    return 400


@pytest.fixture()
def chat_server() -> Iterator[LocalChatServer]:
    """The one test server (tests/collect/local_openai_server.py) without a model: it answers from its queued
    ``replies`` or ``respond(body)``, so a judge's real HTTP exchange is tested."""
    with LocalChatServer() as server:
        yield server
