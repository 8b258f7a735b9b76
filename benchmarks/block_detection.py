"""Block detection on the corpus of page shapes (tests/web/block_corpus): precision and recall of ``blocked``, the
exact-label rate and the confusion of (expected, detected) labels, each page opened as an open-web task in real
Chromium from a loopback server.

    .venv/bin/python benchmarks/block_detection.py [--show-pages]

Goal (docs/collect.md, "The open web"): precision and recall 1.0 on the corpus. The detector measured is the one
of the ``rmsweb_kedro`` on the path: run this file with another checkout's ``src`` first on ``PYTHONPATH`` (and this
corpus) to score that checkout's detector on the same pages.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the corpus lives with the tests

from rmsweb_kedro.web.browser import BrowserConfig, BrowserEnv  # noqa: E402
from tests.web.block_corpus import NONE, CorpusServer, classify, pages, scores  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--show-pages", action="store_true", help="print every page's expected and detected label"
    )
    args = parser.parse_args()
    corpus = pages()
    with CorpusServer(corpus) as server:
        # the corpus server on 127.0.0.1 stands for the vendors' public hosts (private networks are closed)
        config = BrowserConfig(
            host_resolver_rules=server.rules, screenshots=False, allowed_private_networks=["127.0.0.1/32"]
        )
        with BrowserEnv(config) as env:
            started = time.perf_counter()
            results = classify(env, corpus)
            seconds = time.perf_counter() - started
    result = scores(results)
    print(f"pages {result['pages']} ({result['blocks']} blocks, {result['pages'] - result['blocks']} ordinary), "
          f"{seconds / len(corpus) * 1000:.0f} ms a page (reset and detection), load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    print(f"blocked: precision {result['precision']:.3f}, recall {result['recall']:.3f}; exact label "
          f"{result['exact']:.3f}")  # fmt: skip
    labels = sorted({label for pair in result["confusion"] for label in pair} - {NONE}) + [NONE]
    width = max(len(label) for label in labels) + 2
    print("confusion (rows: expected, columns: detected)")
    print(" " * width + "".join(label.rjust(width) for label in labels))
    for expected in labels:
        row = [result["confusion"].get((expected, got), 0) for got in labels]
        if any(row):
            print(expected.ljust(width) + "".join(str(n).rjust(width) for n in row))
    for page, got in results:
        if args.show_pages or (page.label or NONE) != got:
            mark = "  " if (page.label or NONE) == got else "!!"
            print(f"{mark} {page.page:42} expected {page.label or NONE:11} detected {got}")


if __name__ == "__main__":
    main()
