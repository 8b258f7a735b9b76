"""BrowserEnv: headless Chromium driven by Playwright's sync API; ``reset(task)`` and ``step(action)`` return an
:class:`~rmsweb_kedro.schema.Observation` (axtree with element ids, elements, screenshot, URL, tabs, error).

One env per thread: Playwright's sync API belongs to the thread that started it, so create, use and close an env
in the same thread (``rollouts.run_rollouts`` does this for N envs, on threads or Ray actors). Errors of an action (unknown id, timeout, blocked
URL) go into ``Observation.error``; a crashed browser is relaunched with the session's cookies and the last URL,
and that observation has ``env_error=True``. See docs/sandbox.md.

What a page may load depends on the task. A sandbox task keeps to its own host (and ``allowed_domains``), every
request alike, as the sandbox was built. Any other task is on the open web: a top-level navigation stays on the
task's site, its registrable domain (``publicsuffixlist``, offline, private suffixes included: two users' pages on
one hosting suffix are two sites), or a configured domain; sub-resources (scripts, styles, images, fonts, XHR,
frames) load from any http(s) host but the deny list (``blocked_hosts`` and ``blocked_hosts_file``); other schemes
are refused. On the open web each observation also says whether the site refused the browser
(``Observation.blocked``: :func:`block_kind`), an environment outcome the episode records as ``blocked``.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from rmsweb_kedro.actions import Action, ActionType
from rmsweb_kedro.schema import BlockKind, Element, Observation, Task
from rmsweb_kedro.sites import registrable_domain
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
    #: Besides the task's own host (open web: its site); ``"*"``: any host (a search engine's task that must reach
    #: result sites, WebTailBench's from bing.com).
    allowed_domains: list[str] = Field(default_factory=list)
    #: Open web: hosts no request may reach (a host and its subdomains), and a file of more (one host a line, or
    #: hosts-file lines ``0.0.0.0 host``; ``#`` comments), as OpenWebRL keeps one.
    blocked_hosts: list[str] = Field(default_factory=list)
    blocked_hosts_file: str | None = None
    set_of_marks: bool = False
    screenshots: bool = True
    max_text_chars: int = Field(default=100, gt=0)

    def executable_path(self) -> str:
        path = os.environ.get("RMSWEB_CHROMIUM") or self.executable
        if not Path(path).exists():
            raise FileNotFoundError(
                f"Chromium not found at {path!r}: install Debian's chromium or set RMSWEB_CHROMIUM "
                "(or BrowserConfig.executable) to a Chromium executable"
            )
        return path


def format_axtree(items: list[dict[str, Any]]) -> tuple[str, list[Element]]:
    """Snapshot items -> axtree text (``role "name" [id]``) and the interactive elements."""
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


_ELEMENT_LINE = re.compile(r'^(\S+) "((?:[^"\\]|\\.)*)" \[(\d+)\](?: value="((?:[^"\\]|\\.)*)")?')
_UNQUOTE = re.compile(r"\\(.)")


def parse_axtree(axtree: str) -> list[Element]:
    """The interactive elements of an axtree text written by :func:`format_axtree` (id, role, name, value), for
    a recorded step whose observation kept only the text."""
    elements = []
    for line in axtree.splitlines():
        found = _ELEMENT_LINE.match(line)
        if found:
            role, name, element_id, value = found.groups()
            elements.append(
                Element(
                    id=int(element_id),
                    role=role,
                    name=_UNQUOTE.sub(r"\1", name),
                    value=None if value is None else _UNQUOTE.sub(r"\1", value),
                )
            )
    return elements


def read_blocked_hosts(path: str | Path) -> set[str]:
    """The hosts of a blocked-hosts file: one a line (a hosts file's ``0.0.0.0 host`` too), ``#`` comments."""
    hosts = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            hosts.add(words[-1].lower().strip("."))
    return hosts


#: Titles and texts of captcha and anti-bot interstitials (Cloudflare, Akamai, PerimeterX, DataDome, reCAPTCHA).
_INTERSTITIAL_TITLE = re.compile(
    r"^\s*(just a moment|attention required|access denied|are you a (robot|human)|verify you are human|"
    r"security check|one more step|pardon our interruption|robot check|captcha)",
    re.IGNORECASE,
)
_CHALLENGE_TEXT = re.compile(
    r"verify (that )?you are (a )?human|are you a robot|unusual traffic from your|checking your browser|"
    r"checking if the site connection is secure|press (&|and) hold|complete the security check|solve (this|the) captcha",
    re.IGNORECASE,
)
_LOGIN = re.compile(r"(^|[^a-z])(log[ _-]?in|sign[ _-]?in|signin|login|auth|sso)([^a-z]|$)", re.IGNORECASE)
#: A login wall is a login form, not a site page with a sign-in box in its header.
_LOGIN_WALL_MAX_ELEMENTS = 25


def block_kind(signals: dict[str, Any], status: int | None, url: str) -> BlockKind | None:
    """Whether a page refuses the browser, and how: ``captcha`` (a captcha or anti-bot widget, or an interstitial's
    title or text), ``http_403``/``http_429`` (the status of the page's main document), ``login_wall`` (a visible
    password field on a small page whose address or title says log in / sign in); None for an ordinary page.
    ``signals``: the page script ``block_signals``'s result."""
    text = signals.get("text", "")
    if (
        signals.get("captchaWidget")
        or _INTERSTITIAL_TITLE.search(signals.get("title", ""))
        or (len(text) < 2000 and _CHALLENGE_TEXT.search(text))
    ):
        return "captcha"
    if status in (403, 429):
        return "http_403" if status == 403 else "http_429"
    if (
        signals.get("passwordFields", 0) > 0
        and signals.get("interactive", 0) <= _LOGIN_WALL_MAX_ELEMENTS
        and (_LOGIN.search(urlsplit(url).path) or _LOGIN.search(signals.get("title", "")))
    ):
        return "login_wall"
    return None


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

    def __init__(self, config: BrowserConfig | None = None):
        self.config = config or BrowserConfig()
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
        self._context = self._browser.new_context(
            viewport={"width": width, "height": height}, accept_downloads=False
        )
        self._context.set_default_timeout(self.config.action_timeout_ms)
        self._context.set_default_navigation_timeout(self.config.navigation_timeout_ms)
        self._context.route("**/*", self._route)
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
        """Process ids of this env's Chromium processes (Linux /proc); for tests that kill the browser."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if f"--rmsweb-env={self.tag}".encode() in (entry / "cmdline").read_bytes():
                        pids.append(int(entry.name))
                except OSError:
                    continue
        return pids

    # ------------------------------------------------------------------ allow-list
    def allowed(self, url: str, top_level: bool = True) -> bool:
        """Whether a request may go out (module docstring): http(s) only (and ``about:blank``, ``data:``); a
        sandbox task's every request to its host or a configured domain (or a subdomain of one); on the open web a
        ``top_level`` navigation to the task's site or a configured domain, a sub-resource to any host not denied."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return parts.scheme in ("about", "data") and url.startswith(("about:blank", "data:"))
        host = (parts.hostname or "").lower()
        if _within(host, self._denied):
            return False
        if self._site is not None and not top_level:
            return True
        domains = {d.lower() for d in self.config.allowed_domains}
        if host in self._allowed_hosts or "*" in domains or _within(host, domains):
            return True
        return self._site is not None and registrable_domain(host) == self._site

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
        self._allowed_hosts = {(urlsplit(task.start_url).hostname or "").lower()}
        open_web = task.source != "sandbox"
        self._site = registrable_domain(next(iter(self._allowed_hosts))) if open_web else None
        self._last_url = task.start_url
        error, env_error = None, False
        for attempt in range(2):
            try:
                self._fresh_session()
                self._page.goto(task.start_url)
                return self._observe()
            except Exception as err:  # a start that fails twice is an environment error, not the agent's
                error, env_error = f"could not open {task.start_url}: {_first_line(err)}", True
                logger.warning("reset attempt %d of %s failed: %s", attempt + 1, task.id, error)
                self._restart_browser()
        return Observation(url=task.start_url, error=error, env_error=env_error)

    def step(self, action: Action) -> Observation:
        """Perform one action; never raises for the agent's or the page's faults."""
        if self._page is None:
            raise RuntimeError("call reset(task) before step(action)")
        self.step_index += 1
        self._blocked = []
        error, env_error = None, False
        try:
            navigations = self._navigations
            try:
                error = self._perform(action)
            except Exception as err:  # the agent's fault (gone element, bad key...) unless the browser died
                if self._crashed(err):
                    raise
                from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

                error = _first_line(err)
                # a page that does not load in time is the environment's failure, not the agent's
                env_error = action.type in (ActionType.GOTO, ActionType.GO_BACK) and isinstance(
                    err, PlaywrightTimeoutError
                )
            self._settle(navigations)
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

    def _restart_browser(self) -> None:
        self.restarts += 1
        try:
            if self._browser is not None:
                self._browser.close()
        except Exception as err:
            logger.debug("closing a dead browser: %s", err)
        self._browser = self._context = None
        self._launch()
        self._new_context()
        try:
            self._page.goto(self._last_url)
        except Exception as err:
            logger.warning("reloading %s after a restart failed: %s", self._last_url, _first_line(err))

    def _perform(self, action: Action) -> str | None:
        """Run the action; return the agent-facing error text, or None."""
        page, kind = self._page, action.type
        if kind in (ActionType.ANSWER, ActionType.STOP):
            self.final_answer = action.text if kind == ActionType.ANSWER else self.final_answer
            self.done = True
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
        blocked = None
        if self._site is not None and page.url.startswith(("http://", "https://")):
            signals = page.evaluate(_script("block_signals"))
            blocked = block_kind(signals, self._documents.get(id(page)), page.url)
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
