"""The block detector's corpus: page shapes in this folder, each labelled in ``manifest.yml``, served by a real HTTP
server on 127.0.0.1 (the status each page's entry names, redirects for ``via``, one 200x70 picture for any image)
and opened as open-web tasks in a real BrowserEnv, whose ``Observation.blocked`` is the detector's answer.
Chromium's host-resolver rules send every host name to that server, so the vendors' frames in the pages never leave
the machine (an https frame fails there, as a blocked one would).

Used by ``tests/web/test_block_corpus.py`` (every page's label) and ``benchmarks/block_detection.py`` (precision,
recall and the confusion table)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from rmsweb_kedro.contracts.schema import Task

FOLDER = Path(__file__).parent
HOST = "www.blocked-corpus.test"
#: What a page the detector saw nothing on is called in the confusion table.
NONE = "none"


@dataclass(frozen=True)
class Page:
    """One page shape: its file (``<page>.html``), the label it should get, the status it is served with and the
    path that redirects to it (``via``)."""

    page: str
    label: str | None
    tests: str
    status: int = 200
    via: str | None = None

    @property
    def path(self) -> str:
        return self.via or f"/{self.page}"


def pages() -> list[Page]:
    """The manifest's pages; a page whose file is missing (or a file missing from the manifest) raises."""
    entries = yaml.safe_load((FOLDER / "manifest.yml").read_text(encoding="utf-8"))
    listed = [Page(**entry) for entry in entries]
    files = {path.stem for path in FOLDER.glob("*.html")}
    names = {page.page for page in listed}
    if files != names or len(names) != len(listed):
        raise ValueError(
            f"{FOLDER / 'manifest.yml'}: the manifest and the .html files disagree: only in the manifest "
            f"{sorted(names - files)}, only as files {sorted(files - names)}, listed twice "
            f"{sorted(n for n, c in Counter(p.page for p in listed).items() if c > 1)}"
        )
    return listed


class CorpusServer:
    """Serves the corpus on 127.0.0.1 (a free port) until closed; ``rules``: Chromium host-resolver rules sending
    every host there."""

    def __init__(self, corpus: list[Page]):
        by_path = {f"/{page.page}": page for page in corpus}
        redirects = {page.via: f"/{page.page}" for page in corpus if page.via}

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet test output
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?")[0]
                page = by_path.get(path)
                kind = "text/html; charset=utf-8"
                if path in redirects:
                    status, body = 302, b""
                elif path.endswith((".jpg", ".png")):  # any image: one 200x70 picture (a captcha's size)
                    status, body, kind = 200, (FOLDER / "image.png").read_bytes(), "image/png"
                elif page is None or self.headers.get("Host", "").split(":")[0] != HOST:
                    status, body = 404, b"not here"  # a vendor's frame: nothing
                else:
                    status, body = page.status, (FOLDER / f"{page.page}.html").read_bytes()
                self.send_response(status)
                if status == 302:
                    self.send_header("Location", redirects[path])
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> CorpusServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def rules(self) -> str:
        return f"MAP * 127.0.0.1:{self.server.server_address[1]}"


def task(page: Page) -> Task:
    """The open-web task whose start page is ``page``."""
    return Task(id=f"corpus-{page.page}", source="user", site="blocked-corpus", start_url=f"http://{HOST}{page.path}",
                instruction="Read the page.")  # fmt: skip


def classify(env: Any, corpus: list[Page]) -> list[tuple[Page, str]]:
    """Each page and what the env's first observation of it says (``NONE``: not blocked; ``env_error``: not seen)."""
    results = []
    for page in corpus:
        observation = env.reset(task(page))
        results.append((page, "env_error" if observation.env_error else observation.blocked or NONE))
    return results


def scores(results: list[tuple[Page, str]]) -> dict[str, Any]:
    """Precision and recall of ``blocked`` (any kind against none), the exact-label accuracy and the confusion of
    (expected, detected) labels."""
    blocked = [(page.label is not None, got not in (NONE, "env_error")) for page, got in results]
    true_positives = sum(expected and found for expected, found in blocked)
    found, expected = sum(f for _, f in blocked), sum(e for e, _ in blocked)
    return {
        "pages": len(results),
        "blocks": expected,
        "precision": true_positives / found if found else None,
        "recall": true_positives / expected if expected else None,
        "exact": sum((page.label or NONE) == got for page, got in results) / len(results),
        "confusion": Counter((page.label or NONE, got) for page, got in results),
    }
