"""Fixtures of the tasks area: a local website that is not the sandbox (a plain page, a login wall); the full
benchmark files."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.evaluate.conftest import shared_benchmarks  # noqa: F401 (the full benchmark files, or a skip)

LOGIN_PAGE = b"""<!doctype html><html><head><title>Sign in</title></head><body><h1>Members only</h1>
<form><label>Email <input type="email" name="email"></label>
<label>Password <input type="password" name="password" aria-label="Password"></label>
<button type="submit">Sign in</button></form></body></html>"""


PLAIN_PAGE = b"""<!doctype html><html><head><title>Opening hours</title></head><body><h1>Library</h1>
<p>Open 9-17.</p><a href="/about">About us</a></body></html>"""


@pytest.fixture
def local_site():
    """A local website that is not the sandbox: ``/`` a plain page, ``/login`` a login wall."""

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(LOGIN_PAGE if self.path.startswith("/login") else PLAIN_PAGE)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture
def login_site(local_site):
    return local_site + "login"


def write_benchmark_rows(folder: Path) -> None:
    """One row per evaluation benchmark, in its published format, on the sandbox sites' hosts."""
    folder.mkdir()
    (folder / "WebVoyager_data.jsonl").write_text(
        json.dumps(
            {
                "web_name": "Recipes",
                "id": "Recipes--0",
                "web": "http://recipes.sandbox.test/",
                "ques": "Find a vegetarian lasagna recipe with the most reviews.",
            }
        )
        + "\n"  # fmt: skip
    )
    (folder / "Online_Mind2Web_06042025.json").write_text(
        json.dumps([{"task_id": "om-1", "confirmed_task": "Find the cheapest one-way flight from Oslo to Rome.",
                     "website": "https://www.flights.sandbox.test/", "reference_length": 4, "level": "easy"}])
    )  # fmt: skip
    (folder / "WebTailBench_v1_rubrics.stagehand.jsonl").write_text(
        json.dumps({"id": "flights_1", "category": "flights", "web": "",
                    "ques": "Compare the prices of three airlines for a weekend flight to Paris\r",
                    "precomputed_rubric": {"items": [{"criterion": "three airlines", "max_points": 1}]}}) + "\n"
    )  # fmt: skip
