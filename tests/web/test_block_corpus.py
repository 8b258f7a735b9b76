"""The block detector on its corpus of page shapes (tests/web/block_corpus: vendors' interstitials and challenges,
refusing statuses, login walls, and ordinary pages with invisible widgets, sign-in boxes, banners, modals, teasers
and errors), each page served from 127.0.0.1 and opened as an open-web task in real Chromium: every page gets its
label, so precision and recall of ``blocked`` are 1.0 (``benchmarks/block_detection.py`` prints them)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from rmsweb_kedro.web.browser import BrowserConfig, BrowserEnv
from tests.fixtures_web import OnItsThread, chromium_available
from tests.web.block_corpus import NONE, CorpusServer, Page, classify, pages, scores

CORPUS = pages()


@pytest.fixture(scope="module")
def env() -> Iterator[OnItsThread]:
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    with CorpusServer(CORPUS) as server, ThreadPoolExecutor(max_workers=1) as pool:
        browser = OnItsThread(
            # the corpus server on 127.0.0.1 stands for the vendors' public hosts (private networks are closed)
            BrowserEnv(
                BrowserConfig(
                    host_resolver_rules=server.rules,
                    screenshots=False,
                    allowed_private_networks=["127.0.0.1/32"],
                )
            ),
            pool,  # fmt: skip
        )
        yield browser
        browser.close()


def test_the_corpus_has_both_kinds_and_every_kind():
    labels = [page.label for page in CORPUS]
    blocks = sum(label is not None for label in labels)
    assert len(CORPUS) >= 30 and abs(blocks - (len(CORPUS) - blocks)) <= 0.2 * len(CORPUS)
    assert set(labels) == {None, "captcha", "anti_bot", "http_403", "http_429", "login_wall"}


@pytest.mark.browser
@pytest.mark.parametrize("page", CORPUS, ids=lambda page: page.page)
def test_every_page_gets_its_label(env, page: Page):
    [(_, detected)] = classify(env, [page])
    assert detected == (page.label or NONE), page.tests


def test_scores_count_blocks_against_ordinary_pages():
    """Hand-checked: 2 blocks and 2 ordinary pages; one block found with the wrong kind, one missed, one ordinary
    page flagged: precision = 1 / 2, recall = 1 / 2, exact = 1 / 4."""
    block, other = Page("a", "captcha", ""), Page("b", None, "")
    results = [(block, "anti_bot"), (block, NONE), (other, "login_wall"), (other, NONE)]
    result = scores(results)
    assert (result["precision"], result["recall"], result["exact"]) == (0.5, 0.5, 0.25)
    assert result["confusion"][("captcha", "anti_bot")] == 1 and result["confusion"][(NONE, NONE)] == 1
