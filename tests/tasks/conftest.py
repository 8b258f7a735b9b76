"""Fixtures of the tasks area: a local website that is not the sandbox (a plain page, a login wall); the full
benchmark files."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
