"""A loopback site for the frozen-page tests (tests/rollouts/test_frozen_page.py, and tests/rollouts/ray_driver.py
inside its network namespace): ``frozen.test`` serves a page whose script freezes its renderer 300 ms after load
(``while (true) {}``), ``calm.test`` an ordinary page. Open-web tasks on both (the task's own host may be loopback),
an agent that scrolls once and then answers the page's title, a judge that checks the answer."""

from __future__ import annotations

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.contracts.schema import Task, Usage, Verdict
from rmsweb_kedro.episodes.rollouts import EpisodeSpec, Roles
from rmsweb_kedro.web.browser import process_tree

PAGES = {
    "frozen.test": "<html><head><title>Frozen page</title></head><body><p>Soon frozen</p>"
    "<script>setTimeout(() => { while (true) {} }, 300)</script></body></html>",
    "calm.test": "<html><head><title>Calm page</title></head><body><p>Calm</p><button>Nothing</button></body></html>",
}
#: Short deadlines so a frozen page is found within seconds: a scroll's deadline is 2 x 1 s + 2 s.
BROWSER = {
    "hang_timeout_s": 2.0,
    "action_timeout_ms": 1000,
    "navigation_timeout_ms": 5000,
    "screenshots": False,
}


class Site:
    """One loopback server answering as both hosts (Chromium's host-resolver rules send them to it)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet test output
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = PAGES.get(self.headers.get("Host", "").split(":")[0], "not here").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def browser(self) -> dict:
        port = self.server.server_address[1]
        return BROWSER | {"host_resolver_rules": ", ".join(f"MAP {host} 127.0.0.1:{port}" for host in PAGES)}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def episodes(calm: int) -> list[EpisodeSpec]:
    """The frozen page's episode first, then ``calm`` ordinary ones."""
    hosts = ["frozen.test"] + ["calm.test"] * calm
    return [
        EpisodeSpec(key=f"{host}-{i}", max_steps=4, task=Task(id=f"{host}-{i}", source="user", site=host,
                    start_url=f"http://{host}/", instruction="Scroll, then answer the page's title."))
        for i, host in enumerate(hosts)
    ]  # fmt: skip


class Scroller:
    """Thinks for 0.5 s (the frozen page freezes meanwhile), scrolls down once, then answers the page's title."""

    name = "scroller"

    def __init__(self, seed: int = 0):
        self.seed = seed

    def act(self, task, observation, history, reflections) -> Decision:
        if not history:
            time.sleep(0.5)
            return Decision(action=Action(type=ActionType.SCROLL, direction="down"))
        return Decision(action=Action(type=ActionType.ANSWER, text=observation.title))


class TitleJudge:
    """Success when the answer is the calm page's title."""

    name = "title-judge"

    def judge(self, task, steps, final_answer, context) -> tuple[Verdict, Usage]:
        return Verdict(success=final_answer == "Calm page", judge=self.name), Usage()


def title_judge(server) -> TitleJudge:
    return TitleJudge()


def roles() -> Roles:
    return Roles(agent=Scroller, judge=title_judge)


def chromium_descendants() -> list[int]:
    """Chromium processes under this process (its Playwright drivers' browsers, and their children)."""
    left = []
    for pid in process_tree([os.getpid()]):
        try:
            if b"chrom" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]:
                left.append(pid)
        except OSError:
            continue
    return left
