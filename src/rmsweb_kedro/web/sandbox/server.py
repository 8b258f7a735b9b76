"""The sandbox HTTP server: one stdlib ``ThreadingHTTPServer`` on 127.0.0.1 serving every site (registry.all_sites()).

Sites are chosen by the ``Host`` header (``shop.sandbox.test``; Chromium maps ``*.sandbox.test`` to the server with
``--host-resolver-rules``) or, for a person with an ordinary browser, by a path prefix (``/shop/``). Each browser
session gets a ``sid`` cookie; its state lives here and is read by the checkers through :meth:`session_state`,
which no page can reach.
"""

from __future__ import annotations

import copy
import logging
import secrets
import threading
from collections import defaultdict
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from rmsweb_kedro.web.sandbox.pages import Request, Response
from rmsweb_kedro.web.sandbox.registry import World, all_sites, collections

logger = logging.getLogger(__name__)

DOMAIN = "sandbox.test"


def site_url(site: str) -> str:
    """The stable start URL of a site (resolved to the server by Chromium's host-resolver rule)."""
    return f"http://{site}.{DOMAIN}/"


class SandboxServer:
    """The sandbox sites on ``127.0.0.1:port`` (``port=0``: a free port), in a background thread.

    Use as a context manager (or ``start()``/``stop()``)::

        with SandboxServer() as server:
            server.port, server.host_resolver_rules, server.session_state(sid)
    """

    def __init__(self, port: int = 0, seed: int = 0, host: str = "127.0.0.1"):
        self.world = World(seed)
        self._states: dict[str, dict[str, list[dict[str, str]]]] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def host_resolver_rules(self) -> str:
        """The Chromium flag value that sends every ``*.sandbox.test`` host to this server."""
        return f"MAP *.{DOMAIN} 127.0.0.1:{self.port}"

    def session_state(self, session_id: str | None) -> dict[str, list[dict[str, str]]]:
        """A copy of one browser session's state: every collection (empty when the session is unknown)."""
        with self._lock:
            state = self._states.get(session_id or "", {})
            return {name: copy.deepcopy(state.get(name, [])) for name in collections()}

    def start(self) -> SandboxServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="sandbox-server", daemon=True)
        self._thread.start()
        logger.info("Sandbox server on http://127.0.0.1:%d/ (%s)", self.port, self.host_resolver_rules)
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ request handling
    def handle(
        self, method: str, host: str, target: str, body: str, cookies: dict[str, str]
    ) -> tuple[Response, str]:
        """Route one request; returns the response and the session id (new when the request had none)."""
        parts = urlsplit(target)
        path = parts.path or "/"
        hostname = host.split(":")[0].lower()
        if hostname.endswith("." + DOMAIN):
            site, base = hostname[: -len(DOMAIN) - 1], ""
        else:  # path mode: /shop/search?q=...
            segments = path.split("/", 2)
            site, base = segments[1], "/" + segments[1]
            path = "/" + (segments[2] if len(segments) > 2 else "")
            if site not in all_sites():
                links = "".join(
                    f'<li><a href="/{s.name}/">{s.title} ({s.name})</a></li>' for s in all_sites().values()
                )
                return Response(
                    body=f"<!doctype html><title>Sandbox</title><h1>Sandbox sites</h1><ul>{links}</ul>"
                ), ""
        session_id = cookies.get("sid") or secrets.token_hex(8)
        handler = all_sites().get(site)
        if handler is None:
            return Response(
                status=404, body="<!doctype html><title>Not found</title><h1>No such site</h1>"
            ), session_id
        request = Request(
            method=method,
            path=path,
            query=dict(parse_qsl(parts.query)),
            form=dict(parse_qsl(body)),
            base=base,
            consent=cookies.get("consent") == "1",
            brand=handler.title,
        )
        with self._lock:
            state = self._states.setdefault(session_id, defaultdict(list))
            response = handler.handle(self.world.site(site), request, state)
        return response, session_id

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                jar = SimpleCookie(self.headers.get("Cookie") or "")
                cookies = {k: m.value for k, m in jar.items()}
                try:
                    response, session_id = server.handle(
                        method, self.headers.get("Host") or "", self.path, body, cookies
                    )
                except Exception:  # a bug in a page must show as a server error, not kill the server thread
                    logger.exception("Sandbox error on %s %s", method, self.path)
                    response, session_id = Response(status=500, body="<h1>Server error</h1>"), ""
                payload = response.body.encode()
                self.send_response(response.status)
                if response.location:
                    self.send_header("Location", response.location)
                if session_id and cookies.get("sid") != session_id:
                    self.send_header("Set-Cookie", f"sid={session_id}; Path=/; SameSite=Lax")
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

            def log_message(self, format: str, *args: Any) -> None:
                logger.debug("sandbox: " + format, *args)

        return Handler
