"""The viewer's web app (Starlette, server-rendered pages): read-only GET routes over a
:class:`~rmsweb_kedro.viewer.run.Run`; every page's state is in its URL, so a link is shareable.

It answers only requests addressed to a host it serves as (``Host``: 127.0.0.1, localhost, [::1], or one named
with ``--allow-host``; else 400), so a web page that rebinds its own DNS name to 127.0.0.1 cannot read the run
through the browser of whoever opens it. Files: only the run's PNG screenshots (``/file``; the pages' CSS is
inline, there are no other assets), never a checkpoint, table or log under ``data/``."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from rmsweb_kedro.viewer import views
from rmsweb_kedro.viewer.run import MissingColumns, Run, Screenshot, png_size
from rmsweb_kedro.viewer.templates import STYLE, environment

logger = logging.getLogger(__name__)

TABS = [("collection", "Collection"), ("mining", "Mining"), ("salvage", "Salvage-DS"), ("evaluation", "Evaluation"),
        ("live", "Live")]  # fmt: skip
#: tab -> the key of run.TABLES it reads
TAB_TABLES = {"collection": "collection", "mining": "mining", "salvage": "salvage_ds", "evaluation": "evaluation",
              "live": "live"}  # fmt: skip
#: The hosts the viewer always answers as (a ``Host`` header's host; an IPv6 one in brackets).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
PAIRS = [("a_only", "A succeeds, B fails"), ("b_only", "B succeeds, A fails"), ("both", "both succeed"),
         ("neither", "both fail")]  # fmt: skip


def _served(shot: Screenshot) -> str:
    return shot.url or ""


def _inlined(shot: Screenshot) -> str:
    """A screenshot as a data URI (exported pages hold their images)."""
    if shot.file is None:
        return ""
    return "data:image/png;base64," + base64.b64encode(shot.file.read_bytes()).decode("ascii")


def create_app(run: Run, allowed_hosts: Sequence[str] = ()) -> Starlette:
    """The viewer over ``run``, answering requests whose ``Host`` is a loopback name or one of ``allowed_hosts``
    (names or addresses without port, e.g. the machine's name when it listens beyond loopback)."""
    pages = _Pages(run)
    hosts = [*LOOPBACK_HOSTS, *(h if ":" not in h or h.startswith("[") else f"[{h}]" for h in allowed_hosts)]
    return Starlette(
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False)],
        routes=[
            _route("/", _home(pages)),
            *_evaluation_routes(pages),
            *_episode_routes(pages),
            _route("/collection", _collection(pages)),
            *_mining_routes(pages),
            _route("/salvage", _salvage(pages)),
            _route("/live", _live(pages)),
            _route("/file", _screenshot_file(run)),
            _route("/figure", _salvage_figure(run)),
        ],
    )


def _route(path: str, endpoint) -> Route:
    return Route(path, endpoint, methods=["GET"])


class _Pages:
    """What every route shares: the run, and how a page, or the page saying something is not here, is rendered."""

    def __init__(self, run: Run):
        self.run = run
        self.templates = environment()
        self.label = f"{run.project} (env {run.env})"

    def page(
        self, request: Request, name: str, tab: str, title: str, export: bool = False, **context: Any
    ) -> Response:
        html = self.templates.get_template(name).render(
            tabs=TABS, tab=tab, title=title, style=STYLE, run_label=self.label, export=export,
            src=_inlined if export else _served, **context,
        )  # fmt: skip
        return HTMLResponse(html)

    def not_here(self, request: Request, tab: str, title: str, message: str, status: int = 200) -> Response:
        response = self.page(request, "not_here", tab, title, message=message)
        response.status_code = status
        return response

    def guarded(self, tab: str, title: str):
        """A tab's handler: "not in this run" when none of its tables is here; the missing column named when a
        table is older than the view."""

        def wrap(handler):
            async def route(request: Request) -> Response:
                if not self.run.ran(TAB_TABLES[tab]):
                    return self.not_here(
                        request, tab, title, f"{title}: not in this run (the stage did not run)"
                    )
                try:
                    return await run_in_threadpool(handler, request)
                except MissingColumns as err:
                    return self.not_here(request, tab, title, str(err))

            return route

        return wrap


def _number(request: Request, key: str, default: int = 0) -> int:
    try:
        return max(0, int(request.query_params.get(key, default)))
    except ValueError:
        return default


def _linker(path: str, request: Request):
    params = dict(request.query_params)

    def link(page_number: int) -> str:
        return f"{path}?{urlencode(params | {'page': page_number})}"

    return link


def _home(pages: _Pages):
    async def home(request: Request) -> Response:
        for key, _ in TABS:
            if pages.run.ran(TAB_TABLES[key]):
                return RedirectResponse(f"/{key}")
        return pages.not_here(
            request, "", "nothing to view", f"no stage's output is in this run ({pages.run.project})"
        )

    return home


def _evaluation_routes(pages: _Pages) -> list[Route]:
    """The Evaluation tab: the tasks of two models side by side (``/evaluation``), one task's episodes
    (``/evaluation/task``)."""
    run = pages.run

    @pages.guarded("evaluation", "Evaluation")
    def evaluation(request: Request) -> Response:
        q = request.query_params
        names = views.models(run)
        f = {
            "a": q.get("a") or (names[-1] if names else None),
            "b": q.get("b") or (names[-2] if len(names) > 1 else None),
            "pair": q.get("pair", ""),
            "site": q.get("site", ""),
            "split": q.get("split", ""),
            "mode": q.get("mode", ""),
            "termination": q.get("termination", ""),
        }
        current = _number(request, "page")
        rows, total, names = views.evaluation_tasks(run, **f, page=current)

        def task_link(row: dict[str, Any]) -> str:
            return f"/evaluation/task?{urlencode({'task': row['task_id'], 'run': row['run']})}"

        return pages.page(
            request, "evaluation", "evaluation", "Evaluation: tasks", rows=rows, total=total, page=current,
            size=views.PAGE_SIZE, link=_linker("/evaluation", request), links={"task_id": task_link},
            colored=names, models=names, f=f, pairs=PAIRS, choices=views.evaluation_choices(run),
        )  # fmt: skip

    @pages.guarded("evaluation", "Evaluation")
    def evaluation_task(request: Request) -> Response:
        task, run_index = request.query_params.get("task", ""), _number(request, "run")
        found = views.evaluation_task(run, task, run_index)
        if not found["columns"]:
            return pages.not_here(
                request, "evaluation", "Evaluation", f"no episode of task {task!r} run {run_index}", 404
            )
        return pages.page(request, "evaluation_task", "evaluation", f"{task} (run {run_index}): models side by side",
                          **found)  # fmt: skip

    return [_route("/evaluation", evaluation), _route("/evaluation/task", evaluation_task)]


def _episode_routes(pages: _Pages) -> list[Route]:
    """One episode of any stage, stepped through (``/episode``) or exported as one file with its screenshots
    inlined (``/export``)."""
    run = pages.run

    def _episode(request: Request, export: bool) -> Response:
        query = dict(request.query_params)
        stage = query.pop("stage", "")
        current = _number(request, "step")
        query.pop("step", None)
        found = views.episode(run, stage, query)
        if found is None:
            return pages.not_here(
                request, "", "episode", f"no {stage or 'such'} episode {query} in this run", 404
            )
        current = min(current, max(0, len(found.steps) - 1))
        shown_query = urlencode({"stage": stage, **query})
        response = pages.page(request, "episode", stage, found.title, export=export, episode=found,
                              current=current, query=shown_query)  # fmt: skip
        if export:
            name = "".join(c if c.isalnum() or c in "-_." else "_" for c in found.title)[:120] + ".html"
            response.headers["content-disposition"] = f'attachment; filename="{name}"'
        return response

    async def episode(request: Request) -> Response:
        try:
            return await run_in_threadpool(_episode, request, False)
        except MissingColumns as err:
            return pages.not_here(request, "", "episode", str(err))

    async def export(request: Request) -> Response:
        try:
            return await run_in_threadpool(_episode, request, True)
        except MissingColumns as err:
            return pages.not_here(request, "", "episode", str(err))

    return [_route("/episode", episode), _route("/export", export)]


def _collection(pages: _Pages):
    """The Collection tab: its tasks, or one task's attempts (``?task=``)."""
    run = pages.run

    @pages.guarded("collection", "Collection")
    def collection(request: Request) -> Response:
        if task := request.query_params.get("task"):
            attempts = views.collection_task(run, task)
            return pages.page(
                request, "collection_task", "collection", f"Collection: {task}", attempts=attempts
            )
        solved, current = request.query_params.get("solved"), _number(request, "page")
        rows, total = views.collection_tasks(run, current, solved)
        return pages.page(
            request, "collection", "collection", "Collection: tasks", rows=rows, total=total, page=current,
            size=views.PAGE_SIZE, link=_linker("/collection", request), solved=solved,
            links={"task_id": lambda row: f"/collection?{urlencode({'task': row['task_id']})}"},
        )  # fmt: skip

    return collection


def _mining_routes(pages: _Pages) -> list[Route]:
    """The Mining tab: the critical states (``/mining``), one state with its samples (``/mining/state``)."""
    run = pages.run

    @pages.guarded("mining", "Mining")
    def mining(request: Request) -> Response:
        mode, current = request.query_params.get("mode") or None, _number(request, "page")
        try:
            rows, total, table = views.mining_states(run, current, mode)
        except LookupError:
            return pages.not_here(request, "mining", "Mining", "Mining: no mined states in this run")
        return pages.page(
            request, "mining", "mining", "Mining: critical states", rows=rows, total=total, page=current,
            size=views.PAGE_SIZE, link=_linker("/mining", request), table=table, mode=mode,
            links={"state_id": lambda row: f"/mining/state?{urlencode({'id': row['state_id']})}"},
            rollouts=(run.json("mining_online_rollouts") or {}).get("episodes", []),
        )  # fmt: skip

    @pages.guarded("mining", "Mining")
    def mining_state(request: Request) -> Response:
        state_id = request.query_params.get("id", "")
        found = views.mining_state(run, state_id)
        if found is None:
            return pages.not_here(request, "mining", "Mining", f"no state {state_id!r} in this run", 404)
        return pages.page(request, "mining_state", "mining", f"State {state_id}", s=found["state"], **found)

    return [_route("/mining", mining), _route("/mining/state", mining_state)]


def _salvage(pages: _Pages):
    """The Salvage-DS tab: its seeds, figures (served by ``/figure``), groups and report."""

    @pages.guarded("salvage", "Salvage-DS")
    def salvage(request: Request) -> Response:
        found = views.salvage(pages.run)
        report = json.dumps(found["report"], indent=2) if found["report"] is not None else None
        return pages.page(request, "salvage", "salvage", "Salvage-DS", seeds=found["seeds"],
                          figures=found["figures"], report=report, groups=found["groups"])  # fmt: skip

    return salvage


def _live(pages: _Pages):
    """The Live tab: its episodes, each linked to its steps."""

    @pages.guarded("live", "Live")
    def live(request: Request) -> Response:
        results = pages.run.scan("live_results", ["trajectory_id", "task_id", "success", "termination"])
        rows = (
            results.with_columns(views.OUTCOME.alias("outcome")).head(500).collect()
            if results is not None
            else None
        )
        if rows is None:
            return pages.not_here(request, "live", "Live", "Live: not in this run")
        link = {"trajectory_id": lambda row: views.episode_link("live", row)}
        return pages.page(request, "live", "live", "Live episodes", rows=rows, links=link)

    return live


def _screenshot_file(run: Run):
    async def file(request: Request) -> Response:
        """A PNG screenshot from one of the run's screenshot folders; anything else is refused."""
        root, relative = request.query_params.get("root", ""), request.query_params.get("path", "")
        try:
            path = run.resolve(root, relative)
        except PermissionError as err:
            return PlainTextResponse(f"refused: {err}", status_code=403)
        if not path.is_file():
            return PlainTextResponse(
                f"not found: {relative} in the {root} screenshot folder", status_code=404
            )
        try:
            png_size(path)  # a file named .png that is not one (a table renamed) is not a screenshot either
        except (OSError, ValueError):
            return PlainTextResponse(f"refused: {relative!r} is not a PNG file", status_code=403)
        return FileResponse(path, media_type="image/png")

    return file


def _salvage_figure(run: Run):
    async def figure(request: Request) -> Response:
        """A figure of the Salvage-DS tab by catalog name (views.SALVAGE_FIGURES); any other name is refused."""
        name = request.query_params.get("name", "")
        if name not in views.SALVAGE_FIGURES:
            return PlainTextResponse(f"refused: {name!r} is not one of {sorted(views.SALVAGE_FIGURES)}", 403)
        path = run.filepath(name)
        if path is None or not path.is_file():
            return PlainTextResponse(f"not found: {name} is not in this run", status_code=404)
        return FileResponse(path, media_type="image/png")

    return figure
