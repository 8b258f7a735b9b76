"""Private networks are closed on the open web. A page on an open-web host (``open.test``, a loopback server) tries
to reach a second local server standing for a private service (an intranet, the policy's model server, a cloud
metadata service): by ``fetch``, an image, an iframe, a redirected image, a WebSocket, a top-level ``goto`` and a
redirected navigation; the service counts the requests it gets: none. (An iframe's navigation to it may still open a
TCP connection that carries no request: Chromium connects speculatively as a navigation starts, before the route
refuses it.) The same page's requests to a public
site (``cdn.test``), a WebSocket to its own host and a redirect within the public range go through, and with the
private range allowed by the configuration the service is reached (so the count can tell).

Only loopback carries traffic: the open-web servers listen on 127.0.0.1, whose range (127.0.0.1/32) the test's
configuration counts as the public internet; the private service listens on 127.0.0.2 (loopback: non-global). The
injected resolver decides what the names resolve to; Chromium's host-resolver rules send them to the servers. The
address rule itself is checked on literal addresses, none of which is contacted."""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.contracts.schema import Task
from rmsweb_kedro.web.browser import BrowserConfig, BrowserEnv, is_private_address, resolve
from tests.fixtures_web import OnItsThread, chromium_available

PRIVATE = "127.0.0.2"
NAMES = {"open.test": "127.0.0.1", "cdn.test": "127.0.0.1", "intranet.test": PRIVATE, "evil.test": PRIVATE}


def test_private_addresses_are_every_non_global_range():
    private = ["127.0.0.1", "127.8.9.10", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
               "169.254.169.254", "169.254.0.1", "100.64.0.1", "100.127.255.254", "0.0.0.0", "255.255.255.255",
               "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
               "::ffff:169.254.169.254", "224.0.0.1", "ff02::1"]  # fmt: skip
    public = ["8.8.8.8", "1.1.1.1", "93.184.215.14", "172.32.0.1", "172.15.255.255", "100.128.0.1",
              "192.169.0.1", "2606:4700:4700::1111", "2a00:1450:4001::200e", "::ffff:8.8.8.8"]  # fmt: skip
    assert [a for a in private if not is_private_address(a)] == []
    assert [a for a in public if is_private_address(a)] == []
    # the default resolver: a name is judged by what it resolves to (localhost is loopback, whatever its text)
    assert resolve("localhost") and all(is_private_address(a) for a in resolve("localhost"))
    assert resolve("no-such-host.invalid") == []
    # with Chromium's host-resolver rules, the address Chromium will connect to (no lookup)
    rules = "MAP *.sandbox.test 127.0.0.1:8000, MAP gone.test ~NOTFOUND, MAP v6.test [fd00::1]:80"
    assert resolve("shop.sandbox.test", rules) == ["127.0.0.1"] and resolve("gone.test", rules) == []
    assert resolve("v6.test", rules) == ["fd00::1"]
    # an EXCLUDE wins over every MAP wherever it stands, as in Chromium: localhost is looked up, not mapped
    assert "127.0.0.9" not in resolve("localhost", "MAP * 127.0.0.9:1, EXCLUDE localhost")
    assert resolve("other.test", "MAP * 127.0.0.9:1, EXCLUDE localhost") == ["127.0.0.9"]


def test_a_bad_allowed_range_names_the_field():
    with pytest.raises(ValueError, match="allowed_private_networks: '10.0.0.0/33' is no address range"):
        BrowserConfig(allowed_private_networks=["10.0.0.0/33"])


def handler(sites: Sites) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet test output
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            host, path = self.headers.get("Host", "").split(":")[0], urlsplit(self.path).path
            sites.requests.append((host, path))
            if path == "/to":  # a redirect to ?u=
                self.send_response(302)
                self.send_header("Location", parse_qs(urlsplit(self.path).query)["u"][0])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if path == "/ws" and self.headers.get("Upgrade", "").lower() == "websocket":
                key = self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
                self.send_response(101)
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header(
                    "Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()
                )
                self.end_headers()
                time.sleep(3)  # the socket stays open a while
                return
            body = (
                sites.page() if path == "/" else f"<html><head><title>{host}{path}</title></head></html>"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Access-Control-Allow-Origin", "*")  # were it reached, a fetch would read it
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


class Sites:
    """The open web (127.0.0.1) and the private service (127.0.0.2), both stopping with the module."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.open = ThreadingHTTPServer(("127.0.0.1", 0), handler(self))
        self.private = ThreadingHTTPServer((PRIVATE, 0), handler(self))
        for server in (self.open, self.private):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.private.server_address[1]

    def rules(self) -> str:
        ports = {"127.0.0.1": self.open.server_address[1], PRIVATE: self.port}
        return ", ".join(f"MAP {name} {address}:{ports[address]}" for name, address in NAMES.items())

    def page(self) -> str:
        literal = f"http://{PRIVATE}:{self.port}"
        return f"""<html><head><title>Open</title></head><body>
        <img src="http://cdn.test/public.png"> <img src="{literal}/literal.png">
        <img src="http://open.test/to?u=http://intranet.test/redirected.png">
        <iframe src="http://evil.test/frame"></iframe>
        <p id="fetch">pending</p><p id="good">pending</p><p id="bad">pending</p>
        <a href="http://open.test/to?u=http://intranet.test/navigated">Away</a>
        <script>
        const mark = (id, text) => {{ document.getElementById(id).textContent = text; }};
        fetch("http://intranet.test/fetch").then(r => r.text()).then(t => mark("fetch", "read " + t),
                                                                   () => mark("fetch", "refused"));
        const good = new WebSocket("ws://open.test/ws"); good.onopen = () => mark("good", "socket open");
        const bad = new WebSocket("ws://intranet.test/ws"); bad.onopen = () => mark("bad", "socket open");
        bad.onclose = () => mark("bad", "socket closed");
        </script></body></html>"""

    def private_requests(self) -> list[tuple[str, str]]:
        """The requests that reached the private service (by the Host they named)."""
        return [(host, path) for host, path in self.requests if host not in ("open.test", "cdn.test")]

    def stop(self) -> None:
        for server in (self.open, self.private):
            server.shutdown()
            server.server_close()


@pytest.fixture(scope="module")
def sites() -> Iterator[Sites]:
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    served = Sites()
    yield served
    served.stop()


def open_env(sites: Sites, pool: ThreadPoolExecutor, allowed: list[str]) -> OnItsThread:
    config = BrowserConfig(
        host_resolver_rules=sites.rules(),
        screenshots=False,
        allowed_private_networks=allowed,
        allowed_domains=["*"],
    )  # fmt: skip  ("*": live in production, navigations anywhere)
    return OnItsThread(BrowserEnv(config, resolver=lambda host: [NAMES[host]] if host in NAMES else []), pool)


TASK = Task(id="open", source="user", site="open", start_url="http://open.test/", instruction="Look around.")


@pytest.mark.slow
def test_nothing_from_the_open_web_reaches_a_private_service(sites):
    with ThreadPoolExecutor(max_workers=1) as pool:
        env = open_env(sites, pool, ["127.0.0.1/32"])
        try:
            env.reset(TASK)
            page = env.step(Action(type=ActionType.WAIT, seconds=1.5))  # the page's requests and sockets
            text = page.axtree
            assert "refused" in text and "read" not in text  # the fetch
            assert (
                "socket open" in text and "socket closed" in text
            )  # the good socket opened, the bad one closed
            assert ("cdn.test", "/public.png") in sites.requests  # a public site's image loads
            for url in ("http://intranet.test/", f"http://{PRIVATE}:{sites.port}/", "http://evil.test/"):
                went = env.step(Action(type=ActionType.GOTO, url=url))
                assert went.error.startswith("blocked:") and went.url == "http://open.test/", url
            clicked = env.step(
                Action(type=ActionType.CLICK, element=next(e.id for e in page.elements if e.name == "Away"))
            )
            assert clicked.error.startswith("blocked:") and "intranet.test/navigated" in clicked.error
            redirected = env.step(
                Action(type=ActionType.GOTO, url="http://open.test/to?u=http://intranet.test/goto")
            )
            assert redirected.error.startswith("blocked:")
            assert sites.private_requests() == []  # nothing reached the private service
            # a redirect within the public range is followed
            fine = env.step(Action(type=ActionType.GOTO, url="http://open.test/to?u=http://cdn.test/landing"))
            assert fine.error is None and fine.url == "http://cdn.test/landing"
        finally:
            env.close()

        # The same page with the private range allowed: the service is reached (the count can tell).
        env = open_env(sites, pool, ["127.0.0.0/8"])
        try:
            env.reset(TASK)
            page = env.step(Action(type=ActionType.WAIT, seconds=1.5))
            assert "read" in page.axtree
        finally:
            env.close()
        assert ("intranet.test", "/fetch") in sites.private_requests()


def test_a_dedicated_workers_fetch_is_refused_and_its_websocket_is_the_known_gap(sites, monkeypatch):
    # Playwright routes no WebSocket that a dedicated worker opens (docs/collect.md): kept visible here, so the
    # last assertion fails once the gap is closed.
    worker = ("const s = new WebSocket('ws://intranet.test/worker-ws');"
              "fetch('http://intranet.test/worker-fetch').catch(() => 0);")  # fmt: skip
    monkeypatch.setattr(Sites, "page", lambda self: f"""<html><body><script>
        new Worker(URL.createObjectURL(new Blob([{worker!r}], {{type: "text/javascript"}})));
        </script></body></html>""")  # fmt: skip
    with ThreadPoolExecutor(max_workers=1) as pool:
        env = open_env(sites, pool, ["127.0.0.1/32"])
        try:
            env.reset(TASK)
            env.step(Action(type=ActionType.WAIT, seconds=1.5))
        finally:
            env.close()
    reached = sites.private_requests()
    assert ("intranet.test", "/worker-fetch") not in reached  # the worker's fetch is routed and refused
    assert ("intranet.test", "/worker-ws") in reached
