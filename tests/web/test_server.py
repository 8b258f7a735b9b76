"""The sandbox HTTP server over real sockets: host and path dispatch, cookies, per-session state."""

from __future__ import annotations

import http.client
from urllib.parse import urlencode

from rmsweb_kedro.web.sandbox import SandboxServer


def request(server: SandboxServer, path: str, host: str, cookie: str = "", form: dict | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Host": host, "Cookie": cookie}
    body = None
    if form is not None:
        body = urlencode(form)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    connection.request("POST" if form is not None else "GET", path, body=body, headers=headers)
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    return response, text


def test_host_header_and_path_prefix_reach_the_same_site(sandbox_server: SandboxServer) -> None:
    response, by_host = request(sandbox_server, "/search?q=Blue+scarf", "shop.sandbox.test")
    assert response.status == 200 and "Blue scarf" in by_host and 'href="/product/' in by_host
    response, by_path = request(
        sandbox_server, "/shop/search?q=Blue+scarf", f"127.0.0.1:{sandbox_server.port}"
    )
    assert response.status == 200 and 'href="/shop/product/' in by_path
    _, index = request(sandbox_server, "/", f"127.0.0.1:{sandbox_server.port}")
    assert all(
        f'href="/{site}/"' in index
        for site in ("shop", "flights", "dine", "homes", "jobs", "recipes", "hotels")
    )
    response, _ = request(sandbox_server, "/nowhere", "shop.sandbox.test")
    assert response.status == 404


def test_sessions_are_isolated_by_cookie(sandbox_server: SandboxServer) -> None:
    first, _ = request(sandbox_server, "/", "shop.sandbox.test")
    second, _ = request(sandbox_server, "/", "shop.sandbox.test")
    sids = [r.getheader("Set-Cookie").split(";")[0] for r in (first, second)]
    assert sids[0] != sids[1]
    for sid, pid in zip(sids, ("1", "2"), strict=True):
        response, _ = request(
            sandbox_server, "/cart/add", "shop.sandbox.test", sid, {"pid": pid, "size": "M", "qty": "2"}
        )
        assert response.status == 303
    carts = [sandbox_server.session_state(sid.split("=")[1])["cart"] for sid in sids]
    assert carts[0] != carts[1] and len(carts[0]) == len(carts[1]) == 1
    assert carts[0][0]["product"] == sandbox_server.world.site("shop").products[0].name
    assert sandbox_server.session_state("unknown")["cart"] == []


def test_a_second_server_gets_its_own_port_and_stops() -> None:
    with SandboxServer() as server:
        port = server.port
        response, _ = request(server, "/", "jobs.sandbox.test")
        assert response.status == 200
    try:
        http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("GET", "/")
        refused = False
    except OSError:
        refused = True
    assert refused
