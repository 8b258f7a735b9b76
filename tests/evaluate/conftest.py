"""Evaluate-area fixtures: where the shared benchmark files are, and a real local OpenAI-compatible judge server."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

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


class ScriptedChatServer:
    """An OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1 that answers each request with the next
    queued reply text (or HTTP status), or else with ``respond(request body)``, and keeps every request body, so a
    judge's real HTTP exchange is tested."""

    def __init__(self) -> None:
        self.replies: list[str | int] = []
        self.respond: Callable[[dict], str | int] | None = None
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                if server.replies:
                    reply = server.replies.pop(0)
                else:
                    reply = server.respond(body) if server.respond else 500
                if isinstance(reply, int):
                    self.send_response(reply)
                    self.end_headers()
                    return
                payload = json.dumps(
                    {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def chat_server() -> Iterator[ScriptedChatServer]:
    server = ScriptedChatServer()
    yield server
    server.close()
