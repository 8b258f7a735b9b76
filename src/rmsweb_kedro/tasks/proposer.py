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
   (:class:`~rmsweb_kedro.rollouts.CriticalPoints`: paying, personal data, messages, accounts, deleting);
4. ``duplicate``: the same normalised text as a kept task, or a near-duplicate (word-set Jaccard >=
   ``near_duplicate``);
5. ``contaminated``: the site and the intent of a task of an evaluation benchmark (WebVoyager, Online-Mind2Web,
   WebTailBench): same host (``www.`` aside; a benchmark task without its own start page, WebTailBench's, matches
   on intent alone) and word-set Jaccard >= ``intent_similarity``.

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
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.agents.endpoint import ChatEndpoint, Credentials, EndpointConfig, image_part, text_part
from rmsweb_kedro.rollouts import CriticalPoints
from rmsweb_kedro.schema import JudgeSpec, Observation, Task
from rmsweb_kedro.tasks.benchmarks import loaders

logger = logging.getLogger(__name__)

FILTERS = ("malformed", "infeasible", "unsafe", "duplicate", "contaminated")

PROMPT = """You write training tasks for a web agent. You see the start page of one website: its URL, its
accessibility tree and a screenshot. Propose {n} different tasks a person could do on this site starting from
this page, answerable from the site alone, without logging in, paying, sending messages or giving personal data.
Prefer information-seeking and navigation tasks whose answer is on the site.

Reply with JSON only: {{"tasks": [{{"instruction": "...", "difficulty": "easy|medium|hard",
"answer": "the definite answer, or null", "rubric": ["criteria a correct outcome meets"] or null,
"feasible": true}}]}}. Set "feasible" to false for a task you are unsure the site allows."""

_STOP = frozenset(
    "a an the of on in at to for from and or with by is are be what which who how find show me my this that "
    "site page website".split()
)


class DecontaminationParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: folders holding the benchmark files by their standard names (loaders.load_folder); absent ones are skipped
    folders: list[str] = Field(default_factory=lambda: ["data/01_raw/benchmarks"])
    benchmarks: list[str] = Field(default_factory=lambda: ["webvoyager", "online_mind2web", "webtailbench"])
    intent_similarity: float = Field(default=0.6, gt=0, le=1)


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
    near_duplicate: float = Field(default=0.8, gt=0, le=1)
    decontamination: DecontaminationParams = Field(default_factory=DecontaminationParams)
    critical: CriticalPoints = Field(default_factory=CriticalPoints)


def normalise(text: str) -> str:
    """Lower case, punctuation as spaces, single spaces: 'Find the PRICE!' -> 'find the price'."""
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


def words(text: str) -> frozenset[str]:
    """The content words of a text (:func:`normalise`, stop words out)."""
    return frozenset(w for w in normalise(text).split() if w not in _STOP)


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two word sets (0 when both are empty)."""
    return len(a & b) / len(a | b) if a or b else 0.0


def host(url: str) -> str:
    """The URL's host without ``www.`` (the site a task and a benchmark task are compared by)."""
    return (urlparse(url).hostname or "").lower().removeprefix("www.")


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


def benchmark_intents(params: DecontaminationParams) -> list[tuple[str | None, frozenset[str], str]]:
    """(host or None, content words, benchmark task id) of every evaluation benchmark task found."""
    intents = []
    for folder in params.folders:
        if not Path(folder).is_dir():
            logger.warning("decontamination: no benchmark folder %s", folder)
            continue
        for name, result in loaders.load_folder(folder).items():
            if name not in params.benchmarks:
                continue
            for task in result.tasks:
                # WebTailBench rows without a start page all start from one search engine: intent alone
                site = host(task.start_url) if task.metadata.get("start_url_given", True) else None
                intents.append((site, words(task.instruction), f"{name}:{task.id}"))
    return intents


def contaminated_by(
    text: str, url: str, intents: list[tuple[str | None, frozenset[str], str]], threshold: float
) -> str | None:
    """The evaluation task (``benchmark:id``) whose site and intent a task on ``url`` matches, or None."""
    content, site = words(text), host(url)
    for other_site, intent, task_id in intents:
        if (other_site is None or other_site == site) and similarity(content, intent) >= threshold:
            return task_id
    return None


def _task(item: dict[str, Any], url: str, model: str, digest: str) -> Task:
    answer = item.get("answer")
    rubric = [str(c) for c in item.get("rubric") or [] if str(c).strip()]
    if answer not in (None, "", "null"):
        judge = JudgeSpec(kind="reference_answer", config={"reference_answer": str(answer)})
    elif rubric:
        items = [{"criterion": c, "description": "", "max_points": 1.0} for c in rubric]
        judge = JudgeSpec(kind="rubric", config={"rubric": items, "total_points": float(len(items))})
    else:
        judge = JudgeSpec(kind="webjudge")
    instruction = str(item["instruction"]).strip()
    level = str(item.get("difficulty", "")).lower()
    return Task(
        id=f"proposed-{host(url)}-{hashlib.sha256(normalise(instruction).encode()).hexdigest()[:10]}",
        source="proposed",
        site=host(url),
        start_url=url,
        instruction=instruction,
        level=level if level in ("easy", "medium", "hard") else None,
        judge=judge,
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
    benchmark = benchmark_intents(params.decontamination)
    kept: list[Task] = []
    kept_words: list[frozenset[str]] = []
    seen_texts: set[str] = set()
    dropped: list[dict[str, Any]] = []
    per_site: dict[str, dict[str, Any]] = {}

    def drop(url: str, text: str, kind: str, reason: str) -> None:
        dropped.append({"site": url, "instruction": text, "filter": kind, "reason": reason})
        per_site[url][kind] += 1

    def verdict(item: dict[str, Any], url: str) -> tuple[str, str]:
        text = str(item.get("instruction") or "").strip()
        if not text:
            return "malformed", "no instruction"
        if item.get("feasible") is False:
            return "infeasible", "the proposer marked it infeasible"
        if reason := params.critical.in_text(text):
            return "unsafe", reason
        if normalise(text) in seen_texts:
            return "duplicate", "the same text as a kept task"
        content = words(text)
        for other in kept_words:
            if similarity(content, other) >= params.near_duplicate:
                return (
                    "duplicate",
                    f"near-duplicate of a kept task (similarity {similarity(content, other):.2f})",
                )
        if task_id := contaminated_by(text, url, benchmark, params.decontamination.intent_similarity):
            return "contaminated", f"matches evaluation task {task_id}"
        return "kept", ""

    env = BrowserEnv(BrowserConfig.model_validate(params.browser))
    try:
        for number, url in enumerate(sites):
            per_site[url] = {"proposed": 0, "kept": 0, **dict.fromkeys(FILTERS, 0), "site_problem": None}
            page = Task(id=f"site-{number}", source="proposed", site=host(url) or url, start_url=url,
                        instruction="(the proposer looks at this page)")  # fmt: skip
            observation = env.reset(page, screenshot_dir=Path(params.screenshot_root) / f"site-{number}")
            if problem := why_infeasible(observation):
                per_site[url]["site_problem"] = problem
                logger.info("propose: %s skipped (%s)", url, problem)
                continue
            content: list[dict[str, Any]] = [
                text_part(
                    PROMPT.format(n=params.tasks_per_site)
                    + f"\n\nURL: {observation.url}\nTitle: {observation.title}\nAccessibility tree:\n"
                    + observation.axtree[: params.axtree_chars]
                )
            ]
            if params.send_screenshot and observation.screenshot:
                content.append(image_part(observation.screenshot))
            reply = endpoint.complete([{"role": "user", "content": content}], max_tokens=params.max_tokens)
            for item in parse_reply(reply.text):
                per_site[url]["proposed"] += 1
                outcome, reason = verdict(item, url)
                if outcome != "kept":
                    drop(url, str(item.get("instruction") or ""), outcome, reason)
                    continue
                task = _task(item, url, params.endpoint.model, digest)
                kept.append(task)
                kept_words.append(words(task.instruction))
                seen_texts.add(normalise(task.instruction))
                per_site[url]["kept"] += 1
    finally:
        env.close()
    totals = {key: sum(s[key] for s in per_site.values()) for key in ("proposed", "kept", *FILTERS)}
    if totals["proposed"] != totals["kept"] + sum(totals[f] for f in FILTERS):
        raise RuntimeError(f"proposer: proposed != kept + dropped: {totals}")
    report = {
        "proposer_model": params.endpoint.model,
        "prompt_hash": digest,
        "sites": len(sites),
        "sites_infeasible": sum(s["site_problem"] is not None for s in per_site.values()),
        "benchmark_tasks_compared": len(benchmark),
        **totals,
        "per_site": per_site,
        "dropped": dropped,
    }
    logger.info("propose: %s", {k: v for k, v in report.items() if k not in ("per_site", "dropped")})
    return kept, report


def to_jsonl(tasks: list[Task]) -> str:
    """The proposer's output file: one Task a line (the tasks stage reads it back as ``project`` rows)."""
    return "".join(task.model_dump_json() + "\n" for task in tasks)
