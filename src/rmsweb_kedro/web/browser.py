"""BrowserEnv: headless Chromium driven by Playwright's sync API; ``reset(task)`` and ``step(action)`` return an
:class:`~rmsweb_kedro.contracts.schema.Observation` (axtree with element ids, elements, screenshot, URL, tabs, error).

One env per thread: Playwright's sync API belongs to the thread that started it, so create, use and close an env
in the same thread (``rollouts.run_rollouts`` does this for N envs, on threads or Ray actors). Errors of an action (unknown id, timeout, blocked
URL) go into ``Observation.error``; a crashed browser is relaunched with the session's cookies and the last URL,
and that observation has ``env_error=True``. See docs/sandbox.md.

What a page may load depends on the task. A sandbox task keeps to its own host (and ``allowed_domains``), every
request alike, as the sandbox was built. Any other task is on the open web: a top-level navigation stays on the
task's site, its registrable domain (``publicsuffixlist``, offline, private suffixes included: two users' pages on
one hosting suffix are two sites), or a configured domain; sub-resources (scripts, styles, images, fonts, XHR,
frames, WebSockets) load from any http(s)/ws(s) host but the deny list (``blocked_hosts`` and
``blocked_hosts_file``); other schemes are refused. Private networks are closed on the open web: no request of any
kind goes to a host that resolves to a non-global address (loopback, RFC 1918, link-local and cloud metadata,
CGNAT, ULA, unspecified: :func:`is_private_address`), whatever ``allowed_domains`` says, unless it is the task's own
host or the address is in ``allowed_private_networks``; the decision is on the addresses (the env's resolver, by
default a host-resolver rule's target or ``socket.getaddrinfo``, cached per host), not the name. Redirects are
checked hop by hop (Playwright's route sees only a redirect's first URL: a CDP session pauses every response of the
open web's pages), WebSockets through ``route_web_socket``, and service workers are blocked (their requests pass no
route). Known gaps: the addresses are the ones this process resolves, and Chromium resolves again (a DNS-rebinding
name can answer otherwise the second time); a WebSocket a dedicated worker opens passes no route; the redirect
check's CDP session is the page's, so an out-of-process iframe's redirects are not checked hop by hop. On the open web each observation also says whether the site refused the browser (``Observation.blocked``:
:func:`block_kind`), an environment outcome the episode records as ``blocked``.

One module because one :class:`BrowserEnv` owns one Chromium: its deadlines and the watchdog that kills it,
the private-network rule and the block detection all act on the same page and its state.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import os
import re
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from pydantic import BaseModel, Field, field_validator

from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.contracts.schema import BlockKind, Element, Observation, Task
from rmsweb_kedro.contracts.sites import registrable_domain
from rmsweb_kedro.web.page_scripts import load_script

logger = logging.getLogger(__name__)

DEFAULT_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-proxy-server",
]
_SCROLL_PX = 600
_MAX_WAIT_S = 10.0


def _script(name: str) -> str:
    """A page script of web/browser_js/ (read once)."""
    return load_script("rmsweb_kedro.web", f"browser_js/{name}.js")


class BrowserConfig(BaseModel):
    """How Chromium is started and how long actions may take (``params:collect`` may carry one)."""

    executable: str = "/usr/bin/chromium"  # the RMSWEB_CHROMIUM environment variable overrides it
    args: list[str] = Field(default_factory=lambda: list(DEFAULT_ARGS))
    host_resolver_rules: str | None = None  # e.g. SandboxServer.host_resolver_rules
    headless: bool = True
    viewport: tuple[int, int] = (1280, 800)
    action_timeout_ms: int = Field(default=5000, gt=0)
    navigation_timeout_ms: int = Field(default=15000, gt=0)
    # A fixed pause after each action; navigations an action starts are awaited anyway.
    settle_ms: int = Field(default=0, ge=0)
    #: How long past its own timeouts a call into the page may go unanswered before its renderer counts as frozen
    #: (a page script in ``while (true) {}``): the browser is then killed and restarted and the observation is an
    #: environment error. Scripts, screenshots, mouse and keyboard calls have no timeout of their own in Playwright.
    hang_timeout_s: float = Field(default=15.0, gt=0)
    #: Besides the task's own host (open web: its site); ``"*"``: any host (a search engine's task that must reach
    #: result sites, WebTailBench's from bing.com).
    allowed_domains: list[str] = Field(default_factory=list)
    #: Open web: hosts no request may reach (a host and its subdomains), and a file of more (one host a line, or
    #: hosts-file lines ``0.0.0.0 host``; ``#`` comments), as OpenWebRL keeps one.
    blocked_hosts: list[str] = Field(default_factory=list)
    blocked_hosts_file: str | None = None
    #: Open web: non-global address ranges a request may reach besides the task's own host (CIDR, e.g.
    #: ``["10.0.0.0/8"]`` for an intranet's other hosts); none by default.
    allowed_private_networks: list[str] = Field(default_factory=list)
    set_of_marks: bool = False
    screenshots: bool = True
    max_text_chars: int = Field(default=100, gt=0)

    @field_validator("allowed_private_networks")
    @classmethod
    def _networks(cls, networks: list[str]) -> list[str]:
        for network in networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError as err:
                raise ValueError(
                    f"allowed_private_networks: {network!r} is no address range ({err})"
                ) from err
        return networks

    def executable_path(self) -> str:
        path = os.environ.get("RMSWEB_CHROMIUM") or self.executable
        if not Path(path).exists():
            raise FileNotFoundError(
                f"Chromium not found at {path!r}: install Debian's chromium or set RMSWEB_CHROMIUM "
                "(or BrowserConfig.executable) to a Chromium executable"
            )
        return path


def format_axtree(items: list[dict[str, Any]]) -> tuple[str, list[Element]]:
    """Snapshot items -> axtree text (``role "name" [id]``: the grammar of ``contracts/pagetree.py``, which reads a
    recorded tree back) and the interactive elements."""
    lines, elements = [], []
    for item in items:
        if item["kind"] != "element":
            lines.append(f'{item["kind"]} "{_quoted(item["text"])}"')
            continue
        element = Element(
            id=item["id"],
            role=item["role"],
            name=item["name"],
            value=item["value"],
            tag=item["tag"],
            bbox=tuple(item["bbox"]),
        )
        elements.append(element)
        line = f'{element.role} "{_quoted(element.name)}" [{element.id}]'
        if element.role == "combobox" or (element.role == "textbox" and element.value):
            line += f' value="{_quoted(element.value or "")}"'
        elif element.role in ("checkbox", "radio") and element.value == "true":
            line += " checked"
        lines.append(line)
    return "\n".join(lines), elements


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


#: ``resolver(host) -> addresses``: what the open web's private-network rule decides on (tests inject one).
Resolver = Callable[[str], list[str]]


def resolve(host: str, host_resolver_rules: str | None = None) -> list[str]:
    """The addresses Chromium will connect to for ``host``: its first matching ``MAP`` rule of
    ``host_resolver_rules`` (Chromium's flag, as ``BrowserConfig`` passes it: ``MAP pattern target``, ``EXCLUDE
    pattern``, comma-separated; ``~NOTFOUND`` resolves to nothing), else ``socket.getaddrinfo``; [] when it does not
    resolve."""
    rules = [rule.split() for rule in (host_resolver_rules or "").split(",")]
    # as Chromium's HostMappingRules: an EXCLUDE anywhere in the list wins over every MAP
    excluded = any(len(w) == 2 and w[0].upper() == "EXCLUDE" and fnmatch(host, w[1].lower()) for w in rules)
    for words in [] if excluded else rules:
        if len(words) == 3 and words[0].upper() == "MAP" and fnmatch(host, words[1].lower()):
            target = words[2]
            if target == "~NOTFOUND":
                return []
            target = target[1 : target.index("]")] if target.startswith("[") else target.rsplit(":", 1)[0]
            return resolve(target)
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return []
    # an IPv6 scope (fe80::1%eth0) is no part of the address
    return sorted({str(info[4][0]).split("%")[0] for info in infos})


def is_private_address(address: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether an IP address is off the public internet: loopback, private (RFC 1918), link-local (169.254/16 with
    the cloud metadata service, fe80::/10), CGNAT (100.64/10), ULA (fc00::/7), unspecified, reserved, documentation,
    multicast: anything ``ipaddress`` does not call global. An IPv4-mapped IPv6 address (``::ffff:10.0.0.1``) is
    judged as its IPv4 address."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def read_blocked_hosts(path: str | Path) -> set[str]:
    """The hosts of a blocked-hosts file: one a line (a hosts file's ``0.0.0.0 host`` too), ``#`` comments."""
    hosts = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            hosts.add(words[-1].lower().strip("."))
    return hosts


#: Titles and texts of anti-bot interstitials (Cloudflare, Akamai, PerimeterX, DataDome, Imperva, Amazon). A title
#: counts when it is the whole title, or is followed by " | site" (not "Access denied when opening a folder - Help"),
#: and title or text only on a page with little content of its own (an article about captchas may say all of them).
_INTERSTITIAL_TITLE = re.compile(
    r"^\s*(just a moment|attention required|access denied|access to this page has been denied|"
    r"are you a (robot|human)|verify(ing)? you are (a )?human|human verification|security check|one more step|"
    r"pardon our interruption|robot check|checking your browser|please wait|captcha)[\s.!?\u2026]*"
    r"(\s[|\-\u2013\u2014:]\s.*)?$",
    re.IGNORECASE,
)
_CHALLENGE_TEXT = re.compile(
    r"verify(ing)? (that )?you are (a )?human|are you a robot|unusual traffic from your|checking your browser|"
    r"checking if the site connection is secure|press (&|and) hold|complete the security check|"
    r"solve (this|the) captcha|needs to review the security of your connection|incapsula incident|"
    r"you don't have permission to access",
    re.IGNORECASE,
)
#: Little content of its own: at most this many links and controls (``ownControls``) outside challenges, sign-in
#: forms, site chrome (navigation, banner, contentinfo) and overlays (fixed boxes, dialogs), and fewer characters of
#: such text (``ownChars``) than the limits below. Vendors' refusal pages have 0-1 links and 0-500 characters
#: (PerimeterX's block page ~490, Cloudflare's challenge ~160). Set on the corpus of tests/web/block_corpus, whose
#: measured fit and held-out check docs/collect.md gives.
_SPARSE_MAX_CONTROLS = 3
#: Below it an interstitial's title, text or markup, or a 403/429, is the whole page.
_REFUSAL_MAX_CHARS = 600
#: Below it a sign-in card (the form and what surrounds it: block_signals.js) is the page's main content, not a
#: sign-in box beside a page of content (a library's opening hours, an article's teaser).
_LOGIN_WALL_MAX_CHARS = 300


def block_kind(signals: dict[str, Any], status: int | None) -> BlockKind | None:
    """Whether a page refuses the browser, and how; None for an ordinary page. A block is shown and stands between
    the agent and the page (docs/collect.md, "The open web"):

    - ``captcha``: a challenge widget shown on the page (rendered, of real size, on screen: reCAPTCHA's checkbox or
      image challenge, hCaptcha, Turnstile, Arkose, DataDome, PerimeterX's press-and-hold), drawn over the page or
      on a page with little content of its own; not an invisible reCAPTCHA v3 badge, a challenge frame kept
      hidden, or a checkbox in a comment form under an article;
    - ``anti_bot``: an interstitial with little content of its own: a vendor's challenge or refusal markup, or an
      interstitial's title or text ("Just a moment...", "Access denied", "Checking your browser");
    - ``http_403`` / ``http_429``: the page's main document answered so, with little content of its own;
    - ``login_wall``: a visible password field, and its sign-in card is the page's main content.

    ``signals``: the page script ``block_signals``'s result; ``status``: the main document's HTTP status (None:
    unknown, then the page's own navigation timing's)."""
    status = status or signals.get("status")
    title, text = signals.get("title", ""), signals.get("text", "")
    chars, sparse = signals.get("ownChars", 0), signals.get("ownControls", 0) <= _SPARSE_MAX_CONTROLS
    refusal = sparse and chars < _REFUSAL_MAX_CHARS  # the page has little but what refuses the browser
    if signals.get("widget") and (signals.get("overlay") or refusal):
        return "captcha"
    if refusal:
        if signals.get("interstitial") or _INTERSTITIAL_TITLE.search(title) or _CHALLENGE_TEXT.search(text):
            return "anti_bot"
        if status in (403, 429):
            return "http_403" if status == 403 else "http_429"
    if sparse and chars < _LOGIN_WALL_MAX_CHARS and signals.get("passwordFields", 0) > 0:
        return "login_wall"
    return None


def process_tree(roots: list[int]) -> list[int]:
    """``roots`` and all their descendants (``psutil``, as ``models/processes.py`` finds a run's)."""
    import psutil

    family = set(roots)
    for pid in roots:
        try:
            family.update(child.pid for child in psutil.Process(pid).children(recursive=True))
        except psutil.Error:  # gone meanwhile
            continue
    return sorted(family)


class PageHang(RuntimeError):
    """A call into the page went unanswered past its deadline: its renderer froze and the browser was killed."""


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _within(host: str, domains: set[str]) -> bool:
    """Whether ``host`` is one of ``domains`` or a subdomain of one."""
    return any(host == d or host.endswith("." + d) for d in domains)


def _top_level(request: Any) -> bool:
    """Whether a request navigates a page's main frame (a link, a form, ``goto``, a new tab), not a frame's."""
    try:
        return request.is_navigation_request() and request.frame.parent_frame is None
    except Exception:  # a request without a frame (a service worker's) is no navigation
        return False


class BrowserEnv:
    """A headless Chromium for one episode at a time. Not thread-safe: one env per thread."""

    def __init__(self, config: BrowserConfig | None = None, resolver: Resolver | None = None):
        """``resolver``: how the open web's private-network rule finds a host's addresses (default :func:`resolve`
        with the config's host-resolver rules)."""
        self.config = config or BrowserConfig()
        self._resolve = resolver or (lambda host: resolve(host, self.config.host_resolver_rules))
        self._addresses: dict[str, list[str]] = {}  # host -> its addresses, cached for an episode
        self._private_ok = [
            ipaddress.ip_network(n, strict=False) for n in self.config.allowed_private_networks
        ]
        self.tag = uuid.uuid4().hex[:12]  # marks this env's Chromium processes (see browser_pids)
        self._playwright: Any = None
        self._browser: Any = None
        self._context: Any = None
        self._page: Any = None
        self._cdp: Any = None  # CDP session of _cdp_page, for screenshots
        self._cdp_page: Any = None
        self._cookies: list[dict[str, Any]] = []
        self._allowed_hosts: set[str] = set()
        self._site: str | None = None  # the task's registrable domain on the open web; None: a sandbox task
        self._denied = {h.lower().strip(".") for h in self.config.blocked_hosts}
        if self.config.blocked_hosts_file:
            self._denied |= read_blocked_hosts(self.config.blocked_hosts_file)
        self._documents: dict[int, int] = {}  # id(page) -> HTTP status of its main document
        self._origins: set[str] = set()  # origins this context reached (cleared for the next episode)
        self._blocked: list[str] = []
        self._known_pages: set[int] = set()
        self._last_url = "about:blank"
        self._navigations = 0
        self._crashed_pages: set[int] = set()  # id() of pages whose renderer crashed
        self._screenshot_dir: Path | None = None
        self.task: Task | None = None
        self.step_index = 0
        self.final_answer: str | None = None
        self.done = False
        self.restarts = 0

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> BrowserEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the browser and stop Playwright (safe to call twice)."""
        for closer in (self._browser, self._playwright):
            if closer is not None:
                try:
                    with self._bounded(self.config.hang_timeout_s, "closing the browser"):
                        closer.close() if closer is self._browser else closer.stop()
                except Exception as err:  # a dead browser cannot be closed cleanly; it is gone anyway
                    logger.debug("closing: %s", err)
        self._browser = self._playwright = self._context = self._page = self._cdp_page = None

    def _launch(self) -> None:
        if self._playwright is None:
            from playwright.sync_api import sync_playwright

            self._playwright = sync_playwright().start()
        args = [*self.config.args, f"--rmsweb-env={self.tag}"]
        if self.config.host_resolver_rules:
            args.append(f"--host-resolver-rules={self.config.host_resolver_rules}")
        self._browser = self._playwright.chromium.launch(
            executable_path=self.config.executable_path(), headless=self.config.headless, args=args
        )

    def _new_context(self) -> None:
        if self._browser is None or not self._browser.is_connected():
            self._launch()
        if self._context is not None:
            try:
                self._context.close()
            except Exception as err:
                logger.debug("closing context: %s", err)
        width, height = self.config.viewport
        # Service workers blocked: their requests pass no route (nor would a page's, once one controls it).
        self._context = self._browser.new_context(
            viewport={"width": width, "height": height}, accept_downloads=False, service_workers="block"
        )
        self._context.set_default_timeout(self.config.action_timeout_ms)
        self._context.set_default_navigation_timeout(self.config.navigation_timeout_ms)
        self._context.route("**/*", self._route)
        self._context.route_web_socket(lambda _url: True, self._route_socket)
        self._context.add_init_script(_script("navigation_mark"))
        if self._cookies:
            self._context.add_cookies(self._cookies)
        self._adopt(self._context.new_page())

    def _fresh_session(self) -> None:
        """A clean session for an episode: the live context emptied (a new page, the others closed, cookies and the
        storage and cache of every origin it reached cleared), or a new context when none is alive. A new context
        starts a renderer and its services: over a third of a sandbox collection's time (docs/sandbox.md)."""
        if self._context is None or self._browser is None or not self._browser.is_connected():
            self._new_context()
            return
        try:
            page = self._context.new_page()
            for old in self._context.pages:
                if old is not page:
                    old.close()
            cdp = self._context.new_cdp_session(page)
            for origin in sorted(self._origins):
                cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
            cdp.send("Network.clearBrowserCache")
            cdp.detach()
            self._context.clear_cookies()
        except Exception as err:  # a context that cannot be emptied (a dying browser) is replaced
            logger.debug("emptying the context failed (%s); starting a new one", _first_line(err))
            self._new_context()
            return
        self._adopt(page)

    def _adopt(self, page: Any) -> None:
        """``page``, the only one of a new or emptied context, becomes the episode's page."""
        self._crashed_pages, self._origins, self._documents = set(), set(), {}
        self._page = page
        self._watch(page)
        self._known_pages = {id(page)}

    def _watch(self, page: Any) -> None:
        """Count main-frame navigations of a page (the settle step waits for one when a document is leaving) and
        note a crash of its renderer."""
        page.on("framenavigated", lambda frame: self._count_navigation(frame))
        page.on("crash", lambda crashed: self._crashed_pages.add(id(crashed)))
        if self._site is not None:  # the open web only: a sandbox page never refuses the browser
            page.on("response", lambda response: self._note_document(page, response))
            self._check_redirects(page)

    def _check_redirects(self, page: Any) -> None:
        """Pause every response of ``page`` (its frames in its process) through a CDP session of its own, so that a
        redirect is checked before it is followed: Playwright's route sees only a redirect's first URL."""
        cdp = self._context.new_cdp_session(page)
        main_frame = cdp.send("Page.getFrameTree")["frameTree"]["frame"]["id"]
        cdp.on("Fetch.requestPaused", lambda event: self._on_response(cdp, main_frame, event))
        cdp.send("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Response"}]})

    def _on_response(self, cdp: Any, main_frame: str, event: dict[str, Any]) -> None:
        """Let a paused response through, unless it redirects where the request may not go."""
        status = event.get("responseStatusCode") or 0
        location = next(
            (h["value"] for h in event.get("responseHeaders", []) if h["name"].lower() == "location"), None
        )
        target = urljoin(event["request"]["url"], location) if 300 <= status < 400 and location else None
        top_level = event.get("resourceType") == "Document" and event.get("frameId") == main_frame
        try:
            if target is not None and not self.allowed(target, top_level):
                if top_level:
                    self._blocked.append(target)
                cdp.send(
                    "Fetch.failRequest", {"requestId": event["requestId"], "errorReason": "BlockedByClient"}
                )
            else:
                cdp.send("Fetch.continueResponse", {"requestId": event["requestId"]})
        except Exception as err:  # the page or its request went away meanwhile
            logger.debug("answering a paused response: %s", err)

    def _count_navigation(self, frame: Any) -> None:
        if frame.parent_frame is None:
            self._navigations += 1

    def _note_document(self, page: Any, response: Any) -> None:
        """Keep the status of a page's main document (a redirect's last hop wins), for :func:`block_kind`."""
        try:
            if response.request.resource_type == "document" and response.frame.parent_frame is None:
                self._documents[id(page)] = response.status
        except Exception as err:  # a response of a frame already gone
            logger.debug("reading a response: %s", err)

    def browser_pids(self) -> list[int]:
        """Process ids of this env's Chromium processes (those whose command line carries its tag)."""
        import psutil

        flag = f"--rmsweb-env={self.tag}"
        return [
            process.pid
            for process in psutil.process_iter(["cmdline"])
            if any(flag in argument for argument in process.info["cmdline"] or [])
        ]

    def process_tree(self) -> list[int]:
        """This env's Chromium processes and all their descendants (renderers, GPU, zygotes do not carry the tag)."""
        return process_tree(self.browser_pids())

    def kill(self) -> None:
        """Kill this env's Chromium processes; safe from any thread (the owning thread's pending call then raises)."""
        for pid in self.process_tree():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue

    @contextmanager
    def _bounded(self, seconds: float, doing: str) -> Iterator[None]:
        """Run Playwright calls under a deadline; past it a watchdog thread kills this env's Chromium (the pending call
        then raises) and the block raises :class:`PageHang`. A sync Playwright call cannot be interrupted from another
        thread (its objects belong to the owning thread), and killing the processes ends whatever the call waits on:
        a renderer stuck in a script, a dead GPU process, a browser that stopped answering."""
        lock, state = threading.Lock(), {"open": True, "fired": False}

        def expire() -> None:
            with lock:
                if not state["open"]:
                    return
                state["fired"] = True
            logger.warning("no answer to %s in %g s: the page froze; killing the browser", doing, seconds)
            self.kill()

        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        timer.start()
        hang = PageHang(f"the page froze: no answer to {doing} in {seconds:g} s")
        try:
            yield
        except Exception as err:
            if state["fired"]:
                raise hang from err
            raise
        finally:
            with lock:
                state["open"] = False
            timer.cancel()
            if state["fired"]:  # let the kill finish first, or it could reach the browser restarted after it
                timer.join()
        if state["fired"]:
            raise hang

    # ------------------------------------------------------------------ allow-list
    def allowed(self, url: str, top_level: bool = True) -> bool:
        """Whether a request may go out (module docstring): http(s) and ws(s) only (and ``about:blank``,
        ``data:``); a sandbox task's every request to its host or a configured domain (or a subdomain of one); on
        the open web no request to a private address (:meth:`_public`), a ``top_level`` navigation to the task's
        site or a configured domain, a sub-resource to any host not denied."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https", "ws", "wss"):
            return parts.scheme in ("about", "data") and url.startswith(("about:blank", "data:"))
        host = (parts.hostname or "").lower()
        if _within(host, self._denied):
            return False
        if self._site is not None and not self._public(host):
            return False
        if self._site is not None and not top_level:
            return True
        domains = {d.lower() for d in self.config.allowed_domains}
        if host in self._allowed_hosts or "*" in domains or _within(host, domains):
            return True
        return self._site is not None and registrable_domain(host) == self._site

    def _public(self, host: str) -> bool:
        """Open web: whether ``host`` may be reached as far as its addresses go: the task's own host always (the
        sandbox, an intranet task); another only when every address it resolves to is global or in
        ``allowed_private_networks`` (a name that resolves to nothing is refused)."""
        if host in self._allowed_hosts:
            return True
        try:
            addresses = [str(ipaddress.ip_address(host.strip("[]")))]
        except ValueError:
            if host not in self._addresses:
                self._addresses[host] = self._resolve(host)
            addresses = self._addresses[host]
        return bool(addresses) and all(self._reachable(address) for address in addresses)

    def _reachable(self, address: str) -> bool:
        ip = ipaddress.ip_address(address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return not is_private_address(ip) or any(ip in network for network in self._private_ok)

    def _route_socket(self, websocket: Any) -> None:
        """A WebSocket (``route`` sees none) connects under the rules of a sub-resource, or is closed."""
        if self.allowed(websocket.url, top_level=False):
            websocket.connect_to_server()
        else:
            websocket.close()

    def _route(self, route: Any) -> None:
        url = route.request.url
        top_level = self._site is None or _top_level(route.request)
        if self.allowed(url, top_level):
            parts = urlsplit(url)
            if parts.scheme in ("http", "https") and parts.hostname:  # the origin: no user info
                self._origins.add(
                    f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"
                )
            route.continue_()
        else:
            if top_level:  # a denied sub-resource on the open web is not the agent's doing
                self._blocked.append(url)
            route.abort("blockedbyclient")

    # ------------------------------------------------------------------ episode
    @property
    def session_id(self) -> str | None:
        """The sandbox ``sid`` cookie of the task's host (for ``SandboxServer.session_state``)."""
        sids = [c for c in self._cookies if c.get("name") == "sid"]
        for cookie in sids:
            if cookie.get("domain", "").lstrip(".") in self._allowed_hosts:
                return cookie["value"]
        return sids[0]["value"] if sids else None

    def reset(self, task: Task, screenshot_dir: str | Path | None = None) -> Observation:
        """A clean session (no cookies, storage or history of earlier episodes), the task's start URL; the first
        observation (screenshot step_000.png)."""
        self.task, self.step_index, self.final_answer, self.done = task, 0, None, False
        self._screenshot_dir = Path(screenshot_dir) if screenshot_dir else None
        if self._screenshot_dir:
            self._screenshot_dir.mkdir(parents=True, exist_ok=True)
        self._cookies, self._blocked = [], []
        self._addresses = {}  # resolved afresh each episode: a name may have moved to a private address since
        self._allowed_hosts = {(urlsplit(task.start_url).hostname or "").lower()}
        open_web = task.source != "sandbox"
        self._site = registrable_domain(next(iter(self._allowed_hosts))) if open_web else None
        self._last_url = task.start_url
        error, env_error = None, False
        for attempt in range(2):
            try:
                with self._bounded(self._navigation_budget_s, f"opening {task.start_url}"):
                    self._fresh_session()
                    try:
                        self._page.goto(task.start_url)
                    except Exception as err:
                        # an empty 403/429 fails the load (Chromium shows its own error page): the site refused the
                        # browser, which works
                        refused = self._documents.get(id(self._page)) in (403, 429)
                        if not (refused and "ERR_HTTP_RESPONSE_CODE_FAILURE" in str(err)):
                            raise
                return self._observe()
            except Exception as err:  # a start that fails twice is an environment error, not the agent's
                error, env_error = f"could not open {task.start_url}: {_first_line(err)}", True
                logger.warning("reset attempt %d of %s failed: %s", attempt + 1, task.id, error)
                self._restart_browser(reload=False)
        return Observation(url=task.start_url, error=error, env_error=env_error)

    def step(self, action: Action) -> Observation:
        """Perform one action; never raises for the agent's or the page's faults. A frozen page (no answer within
        ``hang_timeout_s`` past the call's own timeout) is killed with its browser, which restarts on a blank page:
        an environment error (the page would freeze again if reloaded)."""
        if self._page is None:
            raise RuntimeError("call reset(task) before step(action)")
        self.step_index += 1
        self._blocked = []
        try:
            return self._step(action)
        except PageHang as err:
            self._restart_browser(reload=False)
            return Observation(url=self._last_url, error=f"{err}; the browser was restarted", env_error=True)

    def _step(self, action: Action) -> Observation:
        error, env_error = None, False
        try:
            navigations = self._navigations
            try:
                with self._bounded(self._action_budget_s(action), f"the action {action.type.value}"):
                    error = self._perform(action)
            except PageHang:
                raise
            except Exception as err:  # the agent's fault (gone element, bad key...) unless the browser died
                if self._crashed(err):
                    raise
                from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

                error = _first_line(err)
                # a page that does not load in time is the environment's failure, not the agent's
                env_error = action.type in (ActionType.GOTO, ActionType.GO_BACK) and isinstance(
                    err, PlaywrightTimeoutError
                )
            with self._bounded(self._navigation_budget_s, "the page settling"):
                self._settle(navigations)
        except PageHang:
            raise
        except Exception as err:
            if self._crashed(err):
                logger.warning("browser failed during %s: %s; restarting", action, _first_line(err))
                self._restart_browser()
                error, env_error = f"the browser crashed and was restarted ({_first_line(err)})", True
            else:
                error, env_error = f"the page did not finish loading: {_first_line(err)}", True
        if self._blocked:
            error = f"blocked: {self._blocked[0]} is not in the allow-list"
            if self._page.url.startswith("chrome-error://"):
                try:
                    self._page.go_back()
                except Exception as err:  # the error page stays; the agent can navigate away itself
                    logger.debug("leaving a blocked page: %s", err)
        try:
            observation = self._observe()
        except PageHang:
            raise
        except Exception as err:  # the page died between the action and the snapshot, or never settled
            if not self._crashed(err):
                return Observation(
                    url=self._page.url, error=f"could not read the page: {_first_line(err)}", env_error=True
                )
            self._restart_browser()
            error, env_error = f"the browser crashed and was restarted ({_first_line(err)})", True
            observation = self._observe()
        observation.error, observation.env_error = error, env_error or observation.env_error
        return observation

    # ------------------------------------------------------------------ internals
    def _crashed(self, err: BaseException) -> bool:
        """Whether ``err`` means the browser or the page's renderer died (not the agent's or the page's fault):
        Playwright's ``TargetClosedError``, a disconnected browser, a closed page, or a page whose renderer crashed
        (Playwright raises a plain ``Error`` then; the page's ``crash`` event tells)."""
        # playwright.sync_api 1.65 exports Error and TimeoutError; TargetClosedError lives with them here, unexported.
        from playwright._impl._errors import TargetClosedError

        alive = (
            self._browser is not None
            and self._browser.is_connected()
            and self._page is not None
            and not self._page.is_closed()
            and id(self._page) not in self._crashed_pages
        )
        return isinstance(err, TargetClosedError) or not alive

    @property
    def _navigation_budget_s(self) -> float:
        """The deadline of opening or settling a page: its navigation and load waits, then ``hang_timeout_s``."""
        config = self.config
        return (
            config.settle_ms + config.navigation_timeout_ms + config.action_timeout_ms
        ) / 1000 + config.hang_timeout_s

    def _action_budget_s(self, action: Action) -> float:
        """The deadline of performing ``action``: its own waits (a navigation, a pause, a new tab's load), then
        ``hang_timeout_s``."""
        config = self.config
        if action.type in (ActionType.GOTO, ActionType.GO_BACK):
            own = config.navigation_timeout_ms / 1000
        elif action.type == ActionType.WAIT:
            own = min(action.seconds or 1.0, _MAX_WAIT_S)
        else:  # a click that opens a tab waits for it, then for its document
            own = 2 * config.action_timeout_ms / 1000
        return own + config.hang_timeout_s

    def _restart_browser(self, reload: bool = True) -> None:
        """A new browser with the session's cookies; ``reload``: back to the last URL (not after a frozen page, which
        would freeze again, nor before a reset, which opens its own)."""
        self.restarts += 1
        try:
            if self._browser is not None:
                self._browser.close()
        except Exception as err:
            logger.debug("closing a dead browser: %s", err)
        self._browser = self._context = None
        self._launch()
        self._new_context()
        if not reload:
            return
        try:
            with self._bounded(self._navigation_budget_s, f"reloading {self._last_url}"):
                self._page.goto(self._last_url)
        except PageHang as err:  # the last page freezes too: a blank page, as after any frozen page
            logger.warning("reloading %s after a restart: %s", self._last_url, err)
            self._restart_browser(reload=False)
        except Exception as err:
            logger.warning("reloading %s after a restart failed: %s", self._last_url, _first_line(err))

    def _perform(self, action: Action) -> str | None:
        """Run the action; return the agent-facing error text, or None."""
        page, kind = self._page, action.type
        if kind in (ActionType.ANSWER, ActionType.STOP):
            self.final_answer = action.text if kind == ActionType.ANSWER else self.final_answer
            self.done = True
            return None
        if kind == ActionType.MEMORIZE:  # the fact lives in the episode's history (the prompt carries it)
            return None
        if kind == ActionType.GOTO:
            if not self.allowed(action.url or ""):
                return f"blocked: {action.url} is not in the allow-list"  # the task's site, on the open web
            page.goto(action.url)
            return None
        if kind == ActionType.GO_BACK:
            return None if page.go_back() is not None else "there is no previous page"
        if kind == ActionType.WAIT:
            page.wait_for_timeout(1000 * min(action.seconds or 1.0, _MAX_WAIT_S))
            return None
        if kind == ActionType.PRESS:
            page.keyboard.press(action.key)
            return None
        if kind == ActionType.SCROLL:
            step = _SCROLL_PX * (action.amount or 1)
            dx, dy = {"up": (0, -step), "down": (0, step), "left": (-step, 0), "right": (step, 0)}[
                action.direction
            ]
            page.mouse.wheel(dx, dy)
            return None
        element = action.element
        if element is None:  # a point: click there, or act on the element under it
            if kind == ActionType.CLICK:
                scroll_x, scroll_y = page.evaluate("[scrollX, scrollY]")
                page.mouse.click(action.x - scroll_x, action.y - scroll_y)
                return None
            element = page.evaluate(_script("point"), [action.x, action.y])
            if element is None:
                return f"no element at x={action.x:g}, y={action.y:g}"
        if kind == ActionType.TYPE:
            return self._type(element, action.text or "", action.submit)
        if kind == ActionType.SELECT_OPTION:
            return self._select(element, action.option or "")
        target = page.evaluate(_script("target"), element)
        if target is None:
            return f"element {element} is not on the page"
        if not target["visible"]:
            return f"element {element} is not visible"
        if kind == ActionType.CLICK and target["disabled"]:
            return f"element {element} is disabled"
        if target["coveredBy"]:
            return f"element {element} is covered by {target['coveredBy']}"
        if kind == ActionType.HOVER:
            page.mouse.move(target["x"], target["y"])
        elif target["opensTab"]:  # wait for the new tab, so that it becomes the active page in _settle
            with self._context.expect_page() as new_page:
                page.mouse.click(target["x"], target["y"])
            new_page.value.wait_for_load_state("domcontentloaded")
        else:
            page.mouse.click(target["x"], target["y"])
        return None

    def _type(self, element: int, text: str, submit: bool) -> str | None:
        outcome = self._page.evaluate(_script("fill"), [element, text])
        if outcome == "missing":
            return f"element {element} is not on the page"
        if outcome not in ("filled", "focused"):
            return f"element {element} {outcome}"
        if outcome == "focused":  # typed text replaces the selected content, as a person's typing would
            if text:
                self._page.keyboard.insert_text(text)
            else:
                self._page.keyboard.press("Delete")
        if submit:
            self._page.keyboard.press("Enter")
        return None

    def _select(self, element: int, option: str) -> str | None:
        outcome = self._page.evaluate(_script("select"), [element, option])
        if outcome.get("missing"):
            return f"element {element} is not on the page"
        if outcome.get("notSelect"):
            return f"element {element} is not a combobox"
        if outcome.get("disabled"):
            return f"element {element} is disabled"
        if not outcome.get("selected"):
            return (
                f'option "{option}" is not in combobox {element} (options: {", ".join(outcome["options"])})'
            )
        return None

    def _settle(self, navigations: int) -> None:
        """Let a started navigation finish (``navigations``: the count before the action); follow a new tab."""
        if self.config.settle_ms:
            self._page.wait_for_timeout(self.config.settle_ms)
        pages = [p for p in self._context.pages if not p.is_closed()]
        fresh = [p for p in pages if id(p) not in self._known_pages]
        for page in fresh:
            self._watch(page)
        self._known_pages |= {id(p) for p in pages}
        if fresh:
            self._page = fresh[-1]
        elif self._page.is_closed():
            self._page = pages[-1] if pages else self._context.new_page()
        if self._leaving():
            deadline = time.monotonic() + self.config.navigation_timeout_ms / 1000
            while self._navigations == navigations and time.monotonic() < deadline:
                self._page.wait_for_timeout(10)
        self._page.wait_for_load_state("domcontentloaded")

    def _leaving(self) -> bool:
        """Whether the current document announced that it is being replaced."""
        try:
            return bool(self._page.evaluate("() => !!window.__rmsNavigating"))
        except Exception as err:  # the document went away under the call: a navigation is underway
            if self._crashed(err):
                raise
            return True

    def _observe(self) -> Observation:
        with self._bounded(self.config.hang_timeout_s, "reading the page"):
            return self._read_page()

    def _read_page(self) -> Observation:
        page = self._page
        for attempt in range(3):
            try:
                snapshot = page.evaluate(_script("snapshot"), self.config.max_text_chars)
                break
            except Exception as err:  # a navigation raced the snapshot: wait for the new document
                if attempt == 2 or self._crashed(err):
                    raise
                page.wait_for_load_state("domcontentloaded")
        axtree, elements = format_axtree(snapshot["items"])
        screenshot = None
        if self._screenshot_dir is not None and self.config.screenshots:
            path = self._screenshot_dir / f"step_{self.step_index:03d}.png"
            if self.config.set_of_marks:
                page.evaluate(_script("marks"))
            self._capture(path)
            if self.config.set_of_marks:
                page.evaluate(_script("unmark"))
            screenshot = str(path)
        self._cookies = self._context.cookies()
        if page.url.startswith(("http://", "https://")):
            self._last_url = page.url
        tabs = [p.url for p in self._context.pages if p is not page and not p.is_closed()] + [page.url]
        blocked = self._refusal(page) if self._site is not None else None
        return Observation(
            url=page.url,
            title=snapshot["title"],
            axtree=axtree,
            elements=elements,
            screenshot=screenshot,
            tabs=tabs,
            blocked=blocked,
            scroll=tuple(snapshot.get("scroll", (0.0, 0.0))),
        )

    def _refusal(self, page: Any) -> BlockKind | None:
        """Whether an open-web page refuses the browser (:func:`block_kind`); so does a 403/429 whose empty body
        Chromium replaced with its own error page."""
        status = self._documents.get(id(page))  # None for a tab opened by the page: its own timing tells
        if page.url.startswith(("http://", "https://")):
            return block_kind(page.evaluate(_script("block_signals")), status)
        if page.url.startswith("chrome-error://"):
            return block_kind({"status": page.evaluate(_script("block_signals"))["status"]}, status)
        return None

    def _capture(self, path: Path) -> None:
        """The viewport as PNG through CDP: with optimizeForSpeed it takes half of page.screenshot's time."""
        if self._cdp_page is not self._page:
            self._cdp = self._context.new_cdp_session(self._page)
            self._cdp_page = self._page
        try:
            shot = self._cdp.send("Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True})
        except Exception as err:  # seen under load with several envs ("Unable to capture screenshot")
            if self._crashed(err):
                raise
            logger.debug("CDP screenshot failed (%s); using page.screenshot", _first_line(err))
            self._page.screenshot(path=path)
            return
        path.write_bytes(base64.b64decode(shot["data"]))
