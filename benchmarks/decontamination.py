"""Decontamination benchmark: precision and recall of the matcher that drops training tasks copying an evaluation
task (``rmsweb_kedro.tasks.decontamination``) on the real benchmark files, beside the word-set Jaccard matcher it
replaced (the peer: content-word Jaccard, same host without ``www.``, dropped at >= 0.6).

    .venv/bin/python benchmarks/decontamination.py --folder ../shared/benchmarks
    .venv/bin/python benchmarks/decontamination.py --folder ../shared/benchmarks --sample 200 --seed 1

The index is the evaluation benchmarks (WebVoyager, Online-Mind2Web, WebTailBench). Positives are copies of
sampled benchmark tasks on the same site: ``reworded`` (synonyms swapped in, a polite opener), ``clauses``
(the task's clauses in another order), ``words`` (every word shuffled), ``edited`` (a number changed or a word
replaced, the tail cut), and ``fara``: Fara's cleaned WebVoyager file, whose 86 reworded tasks are real human edits
of the originals. A positive counts as found when the matcher names its original. Negatives are the benchmark tasks
themselves, each compared with the index without itself: other tasks on its site, distinct tasks that must be
kept. Precision = found / (found + negatives dropped); recall = found / positives. Prints both matchers at the
threshold sweep, each at its best F1 and at its configured threshold.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from rmsweb_kedro.contracts.schema import Task
from rmsweb_kedro.tasks.benchmarks import loaders
from rmsweb_kedro.tasks.decontamination import (
    EVALUATION_BENCHMARKS,
    BenchmarkIndex,
    DecontaminationParams,
    normalise,
)

#: The peer's stop words, as the proposer had them before this matcher.
OLD_STOP = frozenset(
    "a an the of on in at to for from and or with by is are be what which who how find show me my this that "
    "site page website".split()
)
OLD_THRESHOLD = 0.6
#: Rewording by hand-picked synonyms (the matcher has no synonym table: these cost it whole words).
SYNONYMS = {
    "find": "locate", "locate": "track down", "search": "look", "show": "display", "provide": "give",
    "cheapest": "lowest priced", "buy": "purchase", "price": "cost", "get": "obtain", "check": "see",
    "list": "name", "latest": "newest", "highest": "top", "rated": "reviewed", "least": "minimum",
    "more": "over", "hotel": "accommodation", "tell": "say", "identify": "pick out", "determine": "work out",
    "compare": "contrast", "number": "count", "near": "close to", "recipe": "dish", "book": "reserve",
    "available": "offered", "information": "details", "nearest": "closest", "under": "below",
}  # fmt: skip
OPENERS = ("Please", "Can you", "I need you to", "Help me", "Go ahead and")
PASSES = ("reworded", "clauses", "words", "edited")


def reworded(text: str, rng: random.Random) -> str:
    out = [SYNONYMS.get(re.sub(r"\W", "", w.lower()), w) if rng.random() < 0.8 else w for w in text.split()]
    return f"{rng.choice(OPENERS)} {' '.join(out)}"


def clauses(text: str, rng: random.Random) -> str:
    parts = [p for p in re.split(r",\s*|\.\s+|\s+(?:and|with|that|for|in)\s+", text.rstrip(".?! ")) if p]
    rng.shuffle(parts)
    return ", ".join(parts) + "."


def words(text: str, rng: random.Random) -> str:
    shuffled = text.split()
    rng.shuffle(shuffled)
    return " ".join(shuffled)


def edited(text: str, rng: random.Random) -> str:
    tokens = text.split()
    numbers = [i for i, w in enumerate(tokens) if re.search(r"\d", w)]
    if numbers:
        i = rng.choice(numbers)
        tokens[i] = re.sub(r"\d+", lambda m: str(int(m.group()) + rng.randint(1, 9)), tokens[i])
    else:
        content = [i for i, w in enumerate(tokens) if w.lower() not in OLD_STOP and len(w) > 3]
        if content:
            tokens[rng.choice(content)] = rng.choice(["blue", "budget", "family", "weekend", "new"])
    if len(tokens) > 10:
        tokens = tokens[: int(len(tokens) * 0.85)]
    return " ".join(tokens)


TRANSFORMS: dict[str, Callable[[str, random.Random], str]] = {
    "reworded": reworded, "clauses": clauses, "words": words, "edited": edited,
}  # fmt: skip


def old_host(url: str) -> str:
    return (urlparse(url).hostname or "").lower().removeprefix("www.")


def old_words(text: str) -> frozenset[str]:
    return frozenset(w for w in normalise(text).split() if w not in OLD_STOP)


class JaccardPeer:
    """The matcher the proposer used before: content-word Jaccard on the same ``www.``-less host."""

    def __init__(self, tasks: dict[str, list[Task]]):
        self.rows = [
            (f"{b}:{t.id}", old_host(t.start_url) if t.metadata.get("start_url_given", True) else None,
             old_words(t.instruction))
            for b, rows in tasks.items() for t in rows
        ]  # fmt: skip

    def best(self, text: str, url: str, exclude: str | None) -> tuple[str | None, float]:
        query, host = old_words(text), old_host(url)
        found, score = None, 0.0
        for key, other_host, other in self.rows:
            if key == exclude or (other_host is not None and other_host != host):
                continue
            value = len(query & other) / len(query | other) if query or other else 0.0
            if value > score:
                found, score = key, value
        return found, score


class NewMatcher:
    def __init__(self, tasks: dict[str, list[Task]]):
        self.index = BenchmarkIndex(tasks)

    def best(self, text: str, url: str, exclude: str | None) -> tuple[str | None, float]:
        # threshold 0: the best match whatever its score, so one pass serves the whole sweep
        found = self.index.match(text, url, 1e-9, exclude=exclude)
        return (f"{found.benchmark}:{found.task_id}", found.score) if found else (None, 0.0)


def cases(
    tasks: dict[str, list[Task]], reworded_by_hand: list[Task], sample: int, seed: int
) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, str, str]]]:
    """Positives (kind, text, start URL, ``benchmark:id`` of the original) and negatives (text, URL, own key)."""
    rng = random.Random(seed)
    every = [(b, t) for b, rows in tasks.items() for t in rows]
    positives = []
    for benchmark, task in rng.sample(every, min(sample, len(every))):
        for kind, transform in TRANSFORMS.items():
            positives.append(
                (kind, transform(task.instruction, rng), task.start_url, f"{benchmark}:{task.id}")
            )
    positives += [("fara", t.instruction, t.start_url, f"webvoyager:{t.id}") for t in reworded_by_hand]
    negatives = [(t.instruction, t.start_url, f"{b}:{t.id}") for b, t in every]
    return positives, negatives


def scores(matcher, positives, negatives) -> tuple[list[tuple[str, bool, float]], list[float]]:
    """Each positive's (kind, best match is its original, score); each negative's best score."""
    found = []
    for kind, text, url, original in positives:
        key, score = matcher.best(text, url, None)
        found.append((kind, key == original, score))
    return found, [matcher.best(text, url, own)[1] for text, url, own in negatives]


def at(threshold: float, found, negatives) -> dict:
    hits = sum(1 for _, right, s in found if right and s >= threshold)
    false = sum(1 for s in negatives if s >= threshold)
    precision = hits / (hits + false) if hits + false else 1.0
    recall = hits / len(found) if found else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    per_kind = Counter(k for k, right, s in found if right and s >= threshold)
    totals = Counter(k for k, _, _ in found)
    return {
        "threshold": threshold, "precision": precision, "recall": recall, "f1": f1,
        "dropped_distinct": false, "negatives": len(negatives),
        "recall_by_kind": {k: per_kind[k] / n for k, n in totals.items()},
    }  # fmt: skip


def run(folder: Path, sample: int = 200, seed: int = 0) -> dict:
    """Both matchers' figures on the benchmark files under ``folder``."""
    loaded = loaders.load_folder(folder)
    tasks = {name: loaded[name].tasks for name in EVALUATION_BENCHMARKS if name in loaded}
    by_hand = [
        t for t in loaded.get("webvoyager_fara", loaders.LoadResult("")).tasks if t.metadata.get("reworded")
    ]
    positives, negatives = cases(tasks, by_hand, sample, seed)
    configured = DecontaminationParams().intent_similarity
    out: dict = {"index": {k: len(v) for k, v in tasks.items()}, "positives": len(positives),
                 "negatives": len(negatives)}  # fmt: skip
    for name, matcher, default in (
        ("jaccard (peer)", JaccardPeer(tasks), OLD_THRESHOLD),
        ("token_set (new)", NewMatcher(tasks), configured),
    ):
        start = time.perf_counter()
        found, negative = scores(matcher, positives, negatives)
        seconds = time.perf_counter() - start
        sweep = [at(t / 100, found, negative) for t in range(40, 100, 5)]
        out[name] = {
            "configured": at(default, found, negative),
            "best": max(sweep, key=lambda r: (r["f1"], r["threshold"])),
            "sweep": sweep,
            "seconds": seconds,
        }
    return out


def _line(r: dict) -> str:
    kinds = " ".join(f"{k} {v:.0%}" for k, v in sorted(r["recall_by_kind"].items()))
    return (
        f"threshold {r['threshold']:.2f}: P {r['precision']:.3f} R {r['recall']:.3f} F1 {r['f1']:.3f} "
        f"(distinct tasks dropped {r['dropped_distinct']}/{r['negatives']}; recall by kind: {kinds})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--folder", type=Path, default=Path("data/01_raw/benchmarks"))
    parser.add_argument("--sample", type=int, default=200, help="benchmark tasks copied by each transform")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    result = run(args.folder, args.sample, args.seed)
    print(f"index {result['index']}; {result['positives']} positives, {result['negatives']} negatives")
    for name in ("jaccard (peer)", "token_set (new)"):
        r = result[name]
        print(f"{name}  [{r['seconds']:.1f} s]")
        print("  configured " + _line(r["configured"]))
        print("  best F1    " + _line(r["best"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
