"""Decontamination: a training task must not be an evaluation benchmark's task on the same site (the one rule for
task files, proposed tasks and the proposer's filter).

A task is contaminated when an evaluation task (WebVoyager, Online-Mind2Web, WebTailBench) is on its site, the
registrable domain of the start page (:func:`rmsweb_kedro.contracts.sites.site_of`: ``www.`` and ``en.``/``de.`` aside), and
has a near-duplicate intent: :func:`similarity` of their :func:`intent` texts at or above the threshold. A benchmark
task without a start page of its own (WebTailBench's, which start from a search engine) matches on intent alone.

The intent of a text is its content words, lower-cased, punctuation and stop words out; two intents are compared by
rapidfuzz's ``token_set_ratio`` (the words both share, then the rest of each, compared as characters, order ignored:
a shuffled task scores 1, a task inside a longer one scores 1, a plural or a changed date costs a few characters,
not a whole word). On the benchmark files with reworded, shuffled and
partially edited copies it finds more copies and drops fewer distinct tasks than word-set Jaccard
(``benchmarks/decontamination.py``; figures in docs/tasks.md).
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.contracts.schema import Task
from rmsweb_kedro.contracts.sites import site_of

logger = logging.getLogger(__name__)

#: The evaluation benchmarks a training task is compared with (keys of ``loaders.load_folder``).
EVALUATION_BENCHMARKS = ("webvoyager", "online_mind2web", "webtailbench")
#: Every task file ``loaders.load_folder`` reads (Fara's cleaned WebVoyager and GAIA's web subset too).
BenchmarkName = Literal["webvoyager", "online_mind2web", "webtailbench", "webvoyager_fara", "gaia_web"]

_STOP = frozenset(
    "a an the of on in at to for from and or with by is are be was it its as what which who how find show me my "
    "i you your please can could would this that these those site page website".split()
)


class DecontaminationParams(BaseModel):
    """``decontamination`` of ``params:tasks`` and ``params:propose``."""

    model_config = ConfigDict(extra="forbid")

    #: folders holding the benchmark files by their standard names (loaders.load_folder); absent ones are skipped
    folders: list[str] = Field(default_factory=lambda: ["data/01_raw/benchmarks"])
    #: the benchmarks compared with ([]: no decontamination)
    benchmarks: list[BenchmarkName] = Field(default_factory=lambda: list(EVALUATION_BENCHMARKS))
    #: :func:`similarity` at or above which a task on a benchmark task's site is that task (measured: docs/tasks.md)
    intent_similarity: float = Field(default=0.9, gt=0, le=1)


def normalise(text: str) -> str:
    """Lower case, punctuation as spaces, single spaces: 'Find the PRICE!' -> 'find the price'."""
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


def intent(text: str) -> str:
    """The content of a task text that :func:`similarity` compares: normalised, stop words out. (Stemming was
    measured and left out: it merged more distinct tasks than it found copies.)"""
    return " ".join(word for word in normalise(text).split() if word not in _STOP)


def similarity(a: str, b: str) -> float:
    """How near two intents (:func:`intent`) are, 0 to 1: rapidfuzz's ``token_set_ratio`` / 100."""
    from rapidfuzz import fuzz

    return fuzz.token_set_ratio(a, b) / 100


@dataclass(frozen=True)
class Match:
    """The evaluation task a task matched: ``benchmark``, its id, its site (None: intent alone) and the score."""

    benchmark: str
    task_id: str
    site: str | None
    score: float

    def reason(self) -> str:
        where = f"on {self.site}" if self.site else "intent alone: the benchmark task has no start page"
        return f"matches {self.benchmark}:{self.task_id} ({where}, intent similarity {self.score:.2f})"


class BenchmarkIndex:
    """The evaluation tasks by site, to match tasks against (:meth:`match`)."""

    def __init__(self, tasks: dict[str, list[Task]]):
        self._by_site: dict[str | None, list[tuple[str, str]]] = defaultdict(list)  # (benchmark, id)
        self._intents: dict[str | None, list[str]] = defaultdict(list)  # the same rows' intents
        for benchmark, rows in tasks.items():
            for task in rows:
                # WebTailBench rows without a start page all start from one search engine: intent alone
                site = site_of(task.start_url) if task.metadata.get("start_url_given", True) else None
                self._by_site[site].append((benchmark, task.id))
                self._intents[site].append(intent(task.instruction))
        self.size = sum(len(rows) for rows in self._by_site.values())

    @classmethod
    def load(cls, params: DecontaminationParams) -> BenchmarkIndex:
        """The benchmarks of ``params`` found in its folders (a missing folder is logged and skipped)."""
        from rmsweb_kedro.tasks.benchmarks import loaders

        tasks: dict[str, list[Task]] = {}
        for folder in params.folders if params.benchmarks else []:
            if not Path(folder).is_dir():
                logger.warning("decontamination: no benchmark folder %s", folder)
                continue
            for name, result in loaders.load_folder(folder).items():
                if name in params.benchmarks:
                    tasks.setdefault(name, []).extend(result.tasks)
        return cls(tasks)

    def match(self, text: str, url: str, threshold: float, exclude: str | None = None) -> Match | None:
        """The most similar evaluation task on ``url``'s site (or without a site) scoring at least ``threshold``;
        ``exclude``: a ``benchmark:id`` never matched (a benchmark task compared with the others)."""
        from rapidfuzz import fuzz, process

        query, site = intent(text), site_of(url)
        best: Match | None = None
        for where in (site, None):
            rows, intents = self._by_site.get(where, []), self._intents.get(where, [])
            if exclude is not None:
                keep = [i for i, row in enumerate(rows) if f"{row[0]}:{row[1]}" != exclude]
                rows, intents = [rows[i] for i in keep], [intents[i] for i in keep]
            found = process.extractOne(
                query, intents, scorer=fuzz.token_set_ratio, score_cutoff=threshold * 100
            )
            if found is not None and (best is None or found[1] / 100 > best.score):
                benchmark, task_id = rows[found[2]]
                best = Match(benchmark, task_id, where, found[1] / 100)
        return best


def decontaminate(
    tasks: list[Task], index: BenchmarkIndex, threshold: float
) -> tuple[list[Task], list[tuple[Task, Match]]]:
    """(kept, dropped with the evaluation task each matched), in the order given."""
    kept: list[Task] = []
    dropped: list[tuple[Task, Match]] = []
    for task in tasks:
        if (found := index.match(task.instruction, task.start_url, threshold)) is not None:
            dropped.append((task, found))
        else:
            kept.append(task)
    return kept, dropped
