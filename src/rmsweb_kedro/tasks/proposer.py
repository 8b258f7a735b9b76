"""The task proposer: for each website of a list, an LLM over the OpenAI-compatible API looks at the start page
(screenshot and accessibility tree, through :class:`~rmsweb_kedro.web.browser.BrowserEnv`) and proposes
``tasks_per_site`` tasks, each with a difficulty and, where it can, a definite answer or a rubric (PAE's and
InSTA's recipe: tasks written from what the site shows).

Every proposed task goes through the filters in this order and is counted under the first that drops it, so
proposed = kept + sum(dropped) (:func:`propose` checks it):

1. ``malformed``: the reply item has no task text;
2. ``infeasible``: the proposer marked it so (``feasible: false``), or its site could not be seen (no page, an
   environment error, an empty page) or refuses the browser (``Observation.blocked``: captcha, anti-bot, 403/429, login
   wall); such a site's model call is skipped and the site is counted in ``sites_infeasible``;
3. ``unsafe``: the text asks for a critical step, the kinds live episodes stop before
   (:class:`~rmsweb_kedro.episodes.critical.CriticalPoints`: paying, personal data, messages, accounts, deleting);
4. ``duplicate``: the same normalised text as a kept task, or a near-duplicate of one (intent similarity,
   :func:`~rmsweb_kedro.tasks.decontamination.similarity`, >= ``near_duplicate``);
5. ``contaminated``: the site and the intent of a task of an evaluation benchmark (WebVoyager, Online-Mind2Web,
   WebTailBench), by :mod:`rmsweb_kedro.tasks.decontamination`, the rule task files are held to as well.

A proposed task's site is its start page's registrable domain (:func:`rmsweb_kedro.contracts.sites.site_of`). It records what
it carries (its answer, its rubric, or both), not a judge: ``judges.choice.judge_kind`` chooses.

Every kept task records the proposer's model and the hash of its prompt (``metadata.proposer_model``,
``metadata.prompt_hash``); the tasks file is read back by the ``proposer`` source of the tasks stage.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.contracts.schema import JudgeSpec, Observation, Task
from rmsweb_kedro.contracts.sites import site_of
from rmsweb_kedro.episodes.critical import CriticalPoints
from rmsweb_kedro.models.endpoint import ChatEndpoint, Credentials, EndpointConfig, image_part, text_part
from rmsweb_kedro.tasks.benchmarks import loaders
from rmsweb_kedro.tasks.decontamination import (
    BenchmarkIndex,
    DecontaminationParams,
    intent,
    normalise,
    similarity,
)
from rmsweb_kedro.tasks.rubrics import rubric_config

logger = logging.getLogger(__name__)

FILTERS = ("malformed", "infeasible", "unsafe", "duplicate", "contaminated")

PROMPT = """You write training tasks for a web agent. You see the start page of one website: its URL, its
accessibility tree and a screenshot. Propose {n} different tasks a person could do on this site starting from
this page, answerable from the site alone, without logging in, paying, sending messages or giving personal data.
Prefer information-seeking and navigation tasks whose answer is on the site.

Reply with JSON only: {{"tasks": [{{"instruction": "...", "difficulty": "easy|medium|hard",
"answer": "the definite answer, or null", "rubric": ["criteria a correct outcome meets"] or null,
"feasible": true}}]}}. Set "feasible" to false for a task you are unsure the site allows."""


class ProposerParams(BaseModel):
    """``params:propose`` (conf/base/parameters_propose.yml)."""

    model_config = ConfigDict(extra="forbid")

    sites_file: str = "data/01_raw/tasks/sites.txt"  # one URL a line; '#' starts a comment
    tasks_per_site: int = Field(default=5, ge=1)
    endpoint: EndpointConfig | None = None
    max_tokens: int = Field(default=1024, gt=0)
    axtree_chars: int = Field(default=12_000, gt=0)  # the page tree is cut to this length in the prompt
    send_screenshot: bool = True
    screenshot_root: str = "data/01_raw/tasks/proposer_pages"
    browser: dict[str, Any] = Field(default_factory=dict)  # BrowserConfig overrides
    #: intent similarity (decontamination.similarity) at or above which a task duplicates a kept one
    near_duplicate: float = Field(default=0.9, gt=0, le=1)
    decontamination: DecontaminationParams = Field(default_factory=DecontaminationParams)
    critical: CriticalPoints = Field(default_factory=CriticalPoints)


def read_sites(path: str | Path) -> list[str]:
    """The URLs of a sites file (one a line; blank lines and '#' comments skipped); a line that is not an
    http(s) URL raises with its line number."""
    sites = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        url = line.split("#", 1)[0].strip()
        if not url:
            continue
        try:
            sites.append(loaders.http_url(url))
        except ValueError as err:
            raise ValueError(f"{path}: line {number}: {err}; write one http(s) URL a line") from None
    return sites


def prompt_hash(params: ProposerParams) -> str:
    """The hash of the prompt template (the page it is filled with aside): which prompt wrote a task."""
    return hashlib.sha256(PROMPT.format(n=params.tasks_per_site).encode()).hexdigest()[:12]


def why_infeasible(observation: Observation) -> str | None:
    """Why the proposer cannot use a start page: not seen, empty, or refusing the browser (a captcha or anti-bot
    interstitial, HTTP 403/429, a login wall)."""
    if observation.env_error or observation.error:
        return f"page not seen: {observation.error or 'environment error'}"
    if not observation.elements and not observation.axtree.strip():
        return "page not seen: empty page"
    if observation.blocked:  # the browser's own block detection (web.browser.block_kind)
        return f"blocked: {observation.blocked}"
    return None


def parse_reply(text: str) -> list[dict[str, Any]]:
    """The task objects of a reply (``{"tasks": [...]}`` or a bare list, code fences and prose around it
    tolerated); [] when there is none."""
    match = re.search(r"[\[{].*[\]}]", text, flags=re.DOTALL)
    if not match:
        return []
    try:
        value = json.loads(match.group(0))
    except json.JSONDecodeError:
        return []
    items = value.get("tasks", []) if isinstance(value, dict) else value
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _task(item: dict[str, Any], url: str, model: str, digest: str) -> Task:
    answer = item.get("answer")
    rubric = [str(c) for c in item.get("rubric") or [] if str(c).strip()]
    carried: dict[str, Any] = {}
    if answer not in (None, "", "null"):
        carried["reference_answer"] = str(answer)
    if rubric:
        # each criterion worth 1 point (criteria kept as the model wrote them, not stripped)
        carried.update(
            rubric_config([{"criterion": c, "description": "", "max_points": 1.0} for c in rubric])
        )
    instruction = str(item["instruction"]).strip()
    level = str(item.get("difficulty", "")).lower()
    return Task(
        id=f"proposed-{site_of(url)}-{hashlib.sha256(normalise(instruction).encode()).hexdigest()[:10]}",
        source="proposed",
        site=site_of(url),
        start_url=url,
        instruction=instruction,
        level=level if level in ("easy", "medium", "hard") else None,
        judge=JudgeSpec(kind="none", config=carried),
        metadata={"proposer_model": model, "prompt_hash": digest, "proposed_for": url},
    )


def propose(
    params: ProposerParams, credentials: Credentials | None = None
) -> tuple[list[Task], dict[str, Any]]:
    """The kept tasks of every site and the report: per filter, per site, and every dropped task with its
    reason."""
    from rmsweb_kedro.web.browser import BrowserConfig, BrowserEnv

    if params.endpoint is None:
        raise ValueError(
            "params:propose.endpoint is missing: the proposer's model (base_url, model, credentials)"
        )
    endpoint = ChatEndpoint(params.endpoint, credentials)
    digest = prompt_hash(params)
    sites = read_sites(params.sites_file)
    filters = _Filters(params, BenchmarkIndex.load(params.decontamination))
    dropped: list[dict[str, Any]] = []
    per_site: dict[str, dict[str, Any]] = {}
    env = BrowserEnv(BrowserConfig.model_validate(params.browser))
    try:
        for number, url in enumerate(sites):
            per_site[url] = counts = {
                "proposed": 0,
                "kept": 0,
                **dict.fromkeys(FILTERS, 0),
                "site_problem": None,
            }
            page = Task(id=f"site-{number}", source="proposed", site=site_of(url) or url, start_url=url,
                        instruction="(the proposer looks at this page)")  # fmt: skip
            observation = env.reset(page, screenshot_dir=Path(params.screenshot_root) / f"site-{number}")
            if problem := why_infeasible(observation):
                counts["site_problem"] = problem
                logger.info("propose: %s skipped (%s)", url, problem)
                continue
            message = {"role": "user", "content": _site_prompt(params, observation)}
            reply = endpoint.complete([message], max_tokens=params.max_tokens)
            for item in parse_reply(reply.text):
                counts["proposed"] += 1
                outcome, reason = filters.verdict(item, url)
                if outcome != "kept":
                    text = str(item.get("instruction") or "")
                    dropped.append({"site": url, "instruction": text, "filter": outcome, "reason": reason})
                    counts[outcome] += 1
                    continue
                filters.keep(_task(item, url, params.endpoint.model, digest))
                counts["kept"] += 1
    finally:
        env.close()
    report = _report(params.endpoint.model, digest, len(sites), filters.benchmark.size, per_site, dropped)
    logger.info("propose: %s", {k: v for k, v in report.items() if k not in ("per_site", "dropped")})
    return filters.kept, report


class _Filters:
    """The filters after ``malformed`` (module docstring), in order, and what they compare with: the tasks kept so
    far (their normalised texts and intents) and the benchmarks' index."""

    def __init__(self, params: ProposerParams, benchmark: BenchmarkIndex):
        self.params, self.benchmark = params, benchmark
        self.kept: list[Task] = []
        self.kept_intents: list[str] = []
        self.seen_texts: set[str] = set()

    def verdict(self, item: dict[str, Any], url: str) -> tuple[str, str]:
        """``(filter, reason)`` of the first filter that drops a reply item, or ``("kept", "")``."""
        text = str(item.get("instruction") or "").strip()
        if not text:
            return "malformed", "no instruction"
        if item.get("feasible") is False:
            return "infeasible", "the proposer marked it infeasible"
        if reason := self.params.critical.in_text(text):
            return "unsafe", reason
        if normalise(text) in self.seen_texts:
            return "duplicate", "the same text as a kept task"
        content = intent(text)
        for other in self.kept_intents:
            if (score := similarity(content, other)) >= self.params.near_duplicate:
                return "duplicate", f"near-duplicate of a kept task (similarity {score:.2f})"
        if found := self.benchmark.match(text, url, self.params.decontamination.intent_similarity):
            return "contaminated", found.reason()
        return "kept", ""

    def keep(self, task: Task) -> None:
        self.kept.append(task)
        self.kept_intents.append(intent(task.instruction))
        self.seen_texts.add(normalise(task.instruction))


def _site_prompt(params: ProposerParams, observation: Observation) -> list[dict[str, Any]]:
    """The proposer's message content for a start page: the prompt with its URL, title and page tree (cut to
    ``axtree_chars``), and its screenshot when ``send_screenshot``."""
    content: list[dict[str, Any]] = [
        text_part(
            PROMPT.format(n=params.tasks_per_site)
            + f"\n\nURL: {observation.url}\nTitle: {observation.title}\nAccessibility tree:\n"
            + observation.axtree[: params.axtree_chars]
        )
    ]
    if params.send_screenshot and observation.screenshot:
        content.append(image_part(observation.screenshot))
    return content


def _report(
    model: str,
    digest: str,
    sites: int,
    benchmark_size: int,
    per_site: dict[str, dict[str, Any]],
    dropped: list[dict[str, Any]],
) -> dict[str, Any]:
    """The proposer's report, its totals checked: proposed = kept + dropped, over every filter."""
    totals = {key: sum(s[key] for s in per_site.values()) for key in ("proposed", "kept", *FILTERS)}
    if totals["proposed"] != totals["kept"] + sum(totals[f] for f in FILTERS):
        raise RuntimeError(f"proposer: proposed != kept + dropped: {totals}")
    return {
        "proposer_model": model,
        "prompt_hash": digest,
        "sites": sites,
        "sites_infeasible": sum(s["site_problem"] is not None for s in per_site.values()),
        "benchmark_tasks_compared": benchmark_size,
        **totals,
        "per_site": per_site,
        "dropped": dropped,
    }


def to_jsonl(tasks: list[Task]) -> str:
    """The proposer's output file: one Task a line (the tasks stage reads it back as ``project`` rows)."""
    return "".join(task.model_dump_json() + "\n" for task in tasks)
