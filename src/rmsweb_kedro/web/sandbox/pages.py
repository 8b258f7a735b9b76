"""What every sandbox page shares: the request and response, the page frame (header, style, cookie banner) and the
HTML helpers the sites' pages are written with.

A route handler (see :mod:`rmsweb_kedro.web.sandbox.registry`) takes the site's data, a :class:`Request` and the
browser session's state (a dict of collections of plain records, mutated in place under the server's lock) and
returns a :class:`Response`. Links are written with the request's ``base`` (empty under host mapping, ``/<site>``
under path mode) so both ways of reaching a site work.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlencode

from rmsweb_kedro.web.page_scripts import load_script

State = dict[str, list[dict[str, str]]]
esc = html.escape
T = TypeVar("T")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    form: dict[str, str]
    base: str = ""  # "" under host mapping, "/shop" under path mode
    consent: bool = False
    brand: str = ""  # the site's name in its pages' header and titles (Site.title)

    def arg(self, name: str, default: str = "") -> str:
        return (self.form.get(name) if self.method == "POST" else self.query.get(name)) or default

    def url(self, path: str, **params: object) -> str:
        query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
        return f"{self.base}{path}" + (f"?{query}" if query else "")


@dataclass
class Response:
    status: int = 200
    body: str = ""
    location: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


#: A route handler: ``handler(data, request, state, *groups)`` (registry.Route).
Handler = Callable[..., Response]
#: What draws a page around its ``main``: :func:`page`, or a site's own frame over it (the shop's adds a Cart link).
Frame = Callable[[Request, str, str], Response]


_STYLE = (
    "body{font-family:sans-serif;margin:0 0 120px 0}header{background:#234;padding:10px}header a{color:#fff;"
    "margin-right:14px}main{padding:16px;max-width:720px}label{display:block;margin:8px 0}li{margin:6px 0}"
    "#cookie-banner{position:fixed;bottom:0;left:0;right:0;background:#eee;padding:10px;border-top:1px solid #999}"
    "#modal{position:fixed;top:30%;left:30%;background:#fff;border:2px solid #234;padding:20px}"
)


def money(amount: float) -> str:
    """Prices as the sites print them: ``1,250.00 USD``."""
    return f"{amount:,.2f} USD"


def inline_script(package: str, name: str) -> str:
    """A ``<script>`` element holding the page script ``name`` of ``package`` (a site's folder)."""
    return f"<script>{load_script(package, name)}</script>"


def cookie_banner() -> str:
    """At the end of the DOM, so the ids of the page's own elements do not change when it goes away."""
    return (
        '<div id="cookie-banner"><p>We use cookies to improve your visit.</p>'
        '<button onclick="consent()">Accept cookies</button> <button onclick="consent()">Reject</button></div>'
        + inline_script(__package__, "consent.js")
    )


def page(req: Request, title: str, main: str, header_extra: str = "") -> Response:
    """A whole document: the site's header (name, Help, ``header_extra``), ``main``, the banner until consent."""
    name = req.brand
    header = f'<header><a href="{req.url("/")}">{name}</a><a href="{req.url("/help")}">Help</a>{header_extra}</header>'
    banner = "" if req.consent else cookie_banner()
    document = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)} - {name}</title>"
        f"<style>{_STYLE}</style></head><body>{header}<main>{main}</main>{banner}</body></html>"
    )
    return Response(body=document)


def redirect(location: str) -> Response:
    return Response(status=303, location=location)


def notice(req: Request, title: str, heading: str, text: str, frame: Frame = page) -> Response:
    """A page that only tells something, a heading and one paragraph: a form's confirmation or error, Help, 404."""
    return frame(req, title, f"<h1>{heading}</h1><p>{text}</p>")


def notice_page(title: str, heading: str, text: str, frame: Frame = page) -> Handler:
    """The route handler of one :func:`notice`: the page a form redirects to once it is done."""
    return lambda data, req, state: notice(req, title, heading, text, frame)


def not_found(req: Request) -> Response:
    response = notice(req, "Not found", "Page not found", "The page you asked for does not exist.")
    response.status = 404
    return response


def help_page(req: Request) -> Response:
    """Every site's ``/help``: a dead end (the reference solutions' ``dead_end`` alternative)."""
    return notice(req, "Help", "Help", "Questions? Write to our support team.")


def field_input(label: str, name: str, value: str = "", kind: str = "text") -> str:
    return f'<label>{esc(label)} <input type="{kind}" name="{name}" value="{esc(value)}"></label>'


def field_select(
    label: str, name: str, options: list[str], selected: str = "", autosubmit: bool = False
) -> str:
    change = ' onchange="this.form.submit()"' if autosubmit else ""
    items = "".join(f"<option{' selected' if o == selected else ''}>{esc(o)}</option>" for o in options)
    return f'<label>{esc(label)} <select name="{name}"{change}>{items}</select></label>'


def hidden(**values: str) -> str:
    return "".join(f'<input type="hidden" name="{k}" value="{esc(v)}">' for k, v in values.items())


def form(action: str, inner: str, method: str = "get", form_id: str = "") -> str:
    ident = f' id="{form_id}"' if form_id else ""
    return f'<form action="{action}" method="{method}"{ident}>{inner}</form>'


def item_list(items: list[tuple[str, str, str]]) -> str:
    """A result list: (href, link text, fact after the link)."""
    rows = "".join(f'<li><a href="{h}">{esc(t)}</a> <span>{esc(f)}</span></li>' for h, t, f in items)
    return f"<ul>{rows}</ul>"


def sort_by(items: list[T], chosen: str, keys: Mapping[str, Callable[[T], Any]]) -> list[T]:
    """``items`` in the order a sort control's ``chosen`` option asks for (``keys``: the sort key of each option
    that reorders; any other option keeps the items' own order)."""
    return sorted(items, key=keys[chosen]) if chosen in keys else items
