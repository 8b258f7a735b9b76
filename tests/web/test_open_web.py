"""The browser on the open web, with loopback stand-ins for real sites: a local HTTP server answers as several hosts
(Chromium's host-resolver rules send them to it): an unknown shop (``*.unknown-shop.test``) whose page loads its
stylesheet and script from a second site (``static.cdn-elsewhere.test``) and an image from a denied tracker, and
pages imitating an anti-bot interstitial, a 403, a 429 and a login wall. Sub-resources load from the other site, a
top-level navigation to it does not; each refusing page ends its episode ``blocked``, never the agent's failure,
whether it is the start page or one the agent's click reaches (a link, a challenge drawn over the page, a new tab).
The detector's own corpus of page shapes: tests/web/test_block_corpus.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import polars as pl
import pytest

from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.contracts.schema import Task, trajectory_row
from rmsweb_kedro.episodes.collection import CollectParams, collection_log, summarize
from rmsweb_kedro.episodes.episode import EpisodeSettings, run_episode
from rmsweb_kedro.measures.evaluation import EPISODE_SCHEMA, success_summary
from rmsweb_kedro.web.browser import BrowserConfig, BrowserEnv, block_kind, registrable_domain
from tests.fixtures_web import OnItsThread, chromium_available

SHOP = "http://www.unknown-shop.test"
CDN = "http://static.cdn-elsewhere.test"

PAGES = {
    ("www.unknown-shop.test", "/"): (
        200,
        f"""<html><head><title>Unknown shop</title><link rel="stylesheet" href="{CDN}/style.css">
        <script src="{CDN}/app.js" defer></script></head><body><h1>Unknown shop</h1>
        <p id="hide">Hidden by the stylesheet</p><img src="http://pixel.tracker.test/p.png" alt="">
        <a href="{CDN}/page.html">Elsewhere</a> <a href="http://blog.unknown-shop.test/">Blog</a></body></html>""",
    ),
    ("blog.unknown-shop.test", "/"): (
        200,
        "<html><head><title>Blog</title></head><body><h1>Blog</h1></body></html>",
    ),
    ("static.cdn-elsewhere.test", "/style.css"): (200, "#hide { display: none }"),
    ("static.cdn-elsewhere.test", "/app.js"): (
        200,
        "const b = document.createElement('button'); b.textContent = 'Added by script'; document.body.append(b);",
    ),
    ("static.cdn-elsewhere.test", "/page.html"): (200, "<html><body>another site</body></html>"),
    ("www.unknown-shop.test", "/challenge"): (
        200,
        """<html><head><title>Just a moment...</title></head><body><h1>www.unknown-shop.test</h1>
        <div class="cf-turnstile" data-sitekey="0x4AAA"></div><p>Verify you are human.</p></body></html>""",
    ),
    ("www.unknown-shop.test", "/products"): (
        200,
        """<html><head><title>Products</title></head><body><h1>Products</h1><ul>
        <li><a href="/p/1">Kettle</a></li><li><a href="/p/2">Teapot</a></li><li><a href="/p/3">Mugs</a></li></ul>
        <p>Free delivery on orders over 40 euros; every item ships from our warehouse within two working days.</p>
        <a href="/verify">Checkout</a> <a href="/busy-empty" target="_blank">Offers</a>
        <button onclick="document.body.insertAdjacentHTML('beforeend', '<div style=&quot;position:fixed;top:80px;left:300px;width:400px;height:580px&quot;><iframe title=&quot;recaptcha challenge expires in two minutes&quot; src=&quot;/recaptcha/api2/bframe?k=6Le&quot; style=&quot;width:100%;height:100%&quot;></iframe></div>')">Reviews</button>
        </body></html>""",
    ),
    ("www.unknown-shop.test", "/verify"): (
        200,
        """<html><head><title>One more step</title></head><body><h1>One more step</h1>
        <div class="h-captcha" data-sitekey="10000000-ffff"><iframe title="Widget containing checkbox for hCaptcha"
        src="/captcha/v1/static/hcaptcha.html#frame=checkbox"
        style="width:303px;height:78px"></iframe></div></body></html>""",
    ),
    ("www.unknown-shop.test", "/busy-empty"): (429, ""),
    ("www.unknown-shop.test", "/forbidden"): (403, "<html><body><h1>Forbidden</h1></body></html>"),
    ("www.unknown-shop.test", "/busy"): (429, "<html><body><h1>Too many requests</h1></body></html>"),
    ("www.unknown-shop.test", "/account"): (302, "/login?next=/account"),
    ("www.unknown-shop.test", "/login"): (
        200,
        """<html><head><title>Sign in</title></head><body><form><label>Email <input name="email"></label>
        <label>Password <input type="password" name="password"></label><button>Sign in</button></form></body></html>""",
    ),
}


class Sites:
    """One loopback server answering as every host of ``PAGES``; ``requests`` lists (host, path) as they come."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        sites = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet test output
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                host, path = self.headers.get("Host", "").split(":")[0], self.path.split("?")[0]
                sites.requests.append((host, path))
                status, body = PAGES.get((host, path), (404, "not here"))
                self.send_response(status)
                if status == 302:
                    self.send_header("Location", body)
                    body = ""
                kind = (
                    "text/css"
                    if path.endswith(".css")
                    else "text/javascript"
                    if path.endswith(".js")
                    else "text/html"
                )
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body.encode())))
                self.end_headers()
                self.wfile.write(body.encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def rules(self) -> str:
        port = self.server.server_address[1]
        return ", ".join(
            f"MAP *.{d} 127.0.0.1:{port}" for d in ("unknown-shop.test", "cdn-elsewhere.test", "tracker.test")
        )


@pytest.fixture(scope="module")
def sites() -> Iterator[Sites]:
    served = Sites()
    served.thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture(scope="module")
def env(sites: Sites) -> Iterator[OnItsThread]:
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    # Every site here is the loopback server (the host-resolver rules resolve the names to 127.0.0.1): that address
    # stands for the public internet (test_private_networks.py checks the private-network rule itself).
    config = BrowserConfig(host_resolver_rules=sites.rules, blocked_hosts=["tracker.test"], screenshots=False,
                           allowed_private_networks=["127.0.0.1/32"])  # fmt: skip
    with ThreadPoolExecutor(max_workers=1) as pool:
        browser = OnItsThread(BrowserEnv(config), pool)
        yield browser
        browser.close()


def task(path: str = "/", source: str = "user") -> Task:
    return Task(id=f"shop{path.replace('/', '-')}", source=source, site="unknown-shop", start_url=SHOP + path,
                instruction="Find the blog of the unknown shop.")  # fmt: skip


def element(observation, name: str) -> int:
    return next(e.id for e in observation.elements if e.name == name)


def test_site_and_block_rules():
    assert registrable_domain("a.b.github.io") == "b.github.io" != registrable_domain("c.github.io")
    assert registrable_domain("www.bbc.co.uk") == "bbc.co.uk" == registrable_domain("news.bbc.co.uk")
    assert registrable_domain("static.cdn-elsewhere.test") != registrable_domain("www.unknown-shop.test")
    assert registrable_domain("127.0.0.1") == "127.0.0.1"


def test_block_rules_one_signal_at_a_time():
    """Each rule of block_kind on hand-made signals, beside the near miss that must not trip it. Limits: at most
    3 own links/controls; under 600 own characters for a refusal, under 300 for a login wall."""
    page = {"title": "Shoes", "status": 200, "widget": None, "overlay": False, "interstitial": None,
            "passwordFields": 0, "ownChars": 2400, "ownControls": 40, "text": "Shoes"}  # fmt: skip
    small = page | {"ownChars": 120, "ownControls": 1}
    assert block_kind(page, 200) is None and block_kind(small, 200) is None  # small alone is no block
    # a challenge shown over the page blocks whatever else it has; one inline blocks only a page with little else
    assert block_kind(page | {"widget": "recaptcha", "overlay": True}, 200) == "captcha"
    assert block_kind(small | {"widget": "recaptcha", "overlay": False}, 200) == "captcha"
    assert (
        block_kind(page | {"widget": "recaptcha", "overlay": False}, 200) is None
    )  # a comment form's checkbox
    # interstitial markup, title or text: only on a page with little content of its own
    assert block_kind(small | {"interstitial": "cloudflare"}, 200) == "anti_bot"
    assert block_kind(page | {"interstitial": "cloudflare"}, 200) is None
    for title in (
        "Just a moment...",
        "Attention Required! | Cloudflare",
        "Access denied | x.com used Cloudflare",
    ):
        assert block_kind(small | {"title": title}, 200) == "anti_bot", title
    for title in ("Access denied when opening a shared folder - Help", "CAPTCHA: how sites ask"):
        assert block_kind(small | {"title": title}, 200) is None, title
    assert block_kind(small | {"text": "Checking your browser before accessing x.com"}, 200) == "anti_bot"
    assert block_kind(small | {"ownChars": 600, "text": "Checking your browser"}, 200) is None
    assert block_kind(small | {"ownControls": 4, "text": "Checking your browser"}, 200) is None
    # a refusing status with little content; the page's own navigation timing when the listener saw none
    assert block_kind(small, 403) == "http_403" and block_kind(small | {"status": 429}, None) == "http_429"
    assert block_kind(small | {"ownControls": 4}, 403) is None and block_kind(small, 404) is None
    assert block_kind({}, 429) == "http_429"  # Chromium's error page for an empty 429
    # a login wall is a sign-in form with little beside it, not a sign-in box beside content
    assert block_kind(small | {"passwordFields": 1}, 200) == "login_wall"
    assert block_kind(small | {"passwordFields": 1, "ownChars": 300}, 200) is None
    assert block_kind(small | {"passwordFields": 1, "ownControls": 4}, 200) is None


def test_sub_resources_load_from_another_site_but_navigation_stays_on_the_task_site(env, sites):
    observation = env.reset(task())
    assert observation.blocked is None and observation.error is None
    # the other site's script ran and its stylesheet hid the paragraph; the denied tracker was never asked
    assert "Added by script" in observation.axtree and "Hidden by the stylesheet" not in observation.axtree
    assert {("static.cdn-elsewhere.test", "/style.css"), ("static.cdn-elsewhere.test", "/app.js")} <= set(
        sites.requests
    )
    assert not any(host.endswith("tracker.test") for host, _ in sites.requests)

    went = env.step(Action(type=ActionType.GOTO, url=f"{CDN}/page.html"))
    assert went.error.startswith("blocked:") and went.url == f"{SHOP}/"
    clicked = env.step(Action(type=ActionType.CLICK, element=element(went, "Elsewhere")))
    assert clicked.error.startswith("blocked:") and clicked.url == f"{SHOP}/"
    assert ("static.cdn-elsewhere.test", "/page.html") not in sites.requests
    refused = env.step(Action(type=ActionType.GOTO, url="file:///etc/hostname"))
    assert refused.error.startswith("blocked:")
    # another host of the same registrable domain is the same site
    blog = env.step(Action(type=ActionType.CLICK, element=element(refused, "Blog")))
    assert blog.error is None and blog.url == "http://blog.unknown-shop.test/"

    # allowed_domains "*": a search engine's task may navigate to any site
    env.config.allowed_domains.append("*")
    try:
        anywhere = env.step(Action(type=ActionType.GOTO, url=f"{CDN}/page.html"))
    finally:
        env.config.allowed_domains.remove("*")
    assert anywhere.error is None and anywhere.url == f"{CDN}/page.html"

    # A sandbox task keeps the sandbox's rules: its own host only, every request alike.
    strict = env.reset(task(source="sandbox"))
    assert "Hidden by the stylesheet" in strict.axtree and "Added by script" not in strict.axtree


class GoTo:
    """Goes to ``url`` (when given), then stops."""

    name = "goto"

    def __init__(self, url: str | None = None):
        self.url = url

    def act(self, task, observation, history, reflections) -> Decision:
        if self.url and not history:
            return Decision(action=Action(type=ActionType.GOTO, url=self.url))
        return Decision(action=Action(type=ActionType.STOP, status="success"))


class NeverCalled:
    """A judge the test requires never to be asked: a blocked episode is not judged."""

    name = "never-called"

    def __init__(self) -> None:
        self.calls = 0

    def judge(self, task, steps, final_answer, context):
        self.calls += 1
        raise AssertionError(f"{task.id}: a blocked episode was judged")


def test_refusing_pages_end_the_episode_blocked_not_failed(env):
    judge = NeverCalled()
    cases = [
        (task("/challenge"), GoTo(), "anti_bot"),  # Cloudflare's interstitial, its Turnstile never drawn
        (task("/forbidden"), GoTo(), "http_403"),
        (task("/"), GoTo(f"{SHOP}/busy"), "http_429"),  # blocked after the agent's step
        (task("/account"), GoTo(), "login_wall"),  # redirected to a sign-in form
    ]
    runs = [
        run_episode(env, t, agent, judge, max_steps=3, settings=EpisodeSettings(block_retries=1))
        for t, agent, _ in cases
    ]
    for run, (_, _, kind) in zip(runs, cases, strict=True):
        assert (run.termination, run.metadata["blocked"], run.success, run.verdict) == (
            "blocked",
            kind,
            None,
            None,
        )
        assert len(run.metadata["blocks"]) == 2  # tried, retried once, then recorded
    assert [len(run.steps) for run in runs] == [0, 0, 1, 0] and judge.calls == 0

    # Counted apart in the collection statistics, never as the agent's failures.
    stats = summarize(collection_log(runs), CollectParams(modes=["single"]))["modes"]["single"]
    assert (stats["blocked"], stats["attempts"], stats["yield"], stats["env_errors"]) == (4, 4, None, 0)
    # and in evaluate's and live's success summary: not judged, no success rate
    episodes = pl.DataFrame([trajectory_row(run) | {"run": 0} for run in runs], schema=EPISODE_SCHEMA)
    summary = success_summary(episodes, 0.95)
    assert (summary["blocked"], summary["env_errors"], summary["success_rate"]) == (4, 4, None)


class Click:
    """Clicks the element named ``target`` first, then stops."""

    name = "click"

    def __init__(self, target: str):
        self.target = target

    def act(self, task, observation, history, reflections) -> Decision:
        if not history:
            return Decision(action=Action(type=ActionType.CLICK, element=element(observation, self.target)))
        return Decision(action=Action(type=ActionType.STOP, status="success"))


@pytest.mark.slow
def test_a_block_met_after_a_click_ends_the_episode_as_one_at_the_start(env):
    """A challenge the agent's click reaches is handled as a start page's: the attempt restarts ``block_retries``
    times, then ends ``blocked`` with its kind, the steps up to it kept, never judged."""
    assert env.reset(task("/products")).blocked is None  # the page the clicks start from is an ordinary one
    judge = NeverCalled()
    cases = [
        ("Checkout", "captcha"),  # a link to a page with an hCaptcha checkbox
        ("Reviews", "captcha"),  # reCAPTCHA's image challenge drawn over the page: no navigation
        ("Offers", "http_429"),  # a new tab whose empty 429 Chromium replaces with its own error page
    ]
    runs = [
        run_episode(
            env, task("/products"), Click(name), judge, max_steps=3, settings=EpisodeSettings(block_retries=2)
        )
        for name, _ in cases
    ]
    start = run_episode(
        env, task("/challenge"), GoTo(), judge, max_steps=3, settings=EpisodeSettings(block_retries=2)
    )
    for run, (name, kind) in zip(runs, cases, strict=True):
        assert (run.termination, run.metadata["blocked"], run.success, run.verdict) == (
            "blocked",
            kind,
            None,
            None,
        )
        assert len(run.metadata["blocks"]) == len(start.metadata["blocks"]) == 3, name  # tried, retried twice
        assert [step.action.type for step in run.steps] == [ActionType.CLICK], name  # the step that met it
    assert (start.termination, start.steps, judge.calls) == ("blocked", [], 0)
