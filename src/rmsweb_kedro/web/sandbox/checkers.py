"""Programmatic checkers of sandbox tasks: server-side session state or the final answer, normalised."""

from __future__ import annotations

from typing import Any

from rmsweb_kedro.contracts.actions import normalize_answer, normalize_text
from rmsweb_kedro.contracts.schema import JudgedBy, Task, Verdict
from rmsweb_kedro.web.sandbox.registry import collections

JUDGE_NAME = "sandbox-checker/v1"
_MAX_ANSWER_WORDS = 6
#: The checker's judge spec: programmatic (no prompt, no model); its one threshold bounds a matching answer's length.
JUDGED_BY = JudgedBy(
    kind="sandbox_checker",
    protocol="sandbox/checker",
    prompt_source="none",
    prompt_ref=JUDGE_NAME,
    thresholds={"max_answer_words": _MAX_ANSWER_WORDS},
)


def answer_matches(final_answer: str, expected: str) -> bool:
    """Equal after ``normalize_answer``, or the expected words inside a short answer ('540 calories')."""
    got, want = normalize_answer(final_answer), normalize_answer(expected)
    if got == want:
        return True
    words = got.split()
    n = len(want.split())
    return len(words) <= _MAX_ANSWER_WORDS and any(
        " ".join(words[i : i + n]) == want for i in range(len(words))
    )


def record_matches(record: dict[str, Any], match: dict[str, Any]) -> bool:
    return all(normalize_text(str(record.get(k, ""))) == normalize_text(str(v)) for k, v in match.items())


def check(task: Task, session_state: dict[str, list[dict[str, Any]]], final_answer: str | None) -> Verdict:
    """Judge a finished sandbox episode from the server's session state and the final answer."""
    if task.judge.kind != "sandbox_checker":
        raise ValueError(f"task {task.id}: judge kind is {task.judge.kind!r}, not 'sandbox_checker'")
    config = task.judge.config
    kind = config.get("checker")
    if kind == "answer":
        expected = str(config["expected"])
        if final_answer is None:
            return verdict(False, "no final answer was given", expected=expected)
        success = answer_matches(final_answer, expected)
        reason = (
            "the answer matches"
            if success
            else f"answer {final_answer!r} does not match the expected {expected!r}"
        )
        return verdict(success, reason, expected=expected, answer=final_answer)
    if kind == "record":
        collection, match = config["collection"], config["match"]
        if collection not in collections():
            raise ValueError(
                f"task {task.id}: judge.config.collection {collection!r} is not one of {collections()}"
            )
        records = session_state.get(collection, [])
        success = any(record_matches(r, match) for r in records)
        if success:
            reason = f"{collection} holds the expected record"
        elif records:
            reason = f"no record of {collection} matches {match}; found {records}"
        else:
            reason = f"{collection} is empty"
        return verdict(success, reason, collection=collection, match=match)
    raise ValueError(f"task {task.id}: judge.config.checker {kind!r} is neither 'answer' nor 'record'")


def verdict(success: bool, reason: str, **details: Any) -> Verdict:
    """The checker's Verdict: signed with its name and spec, ``details`` what it compared."""
    return Verdict(success=success, reason=reason, judge=JUDGE_NAME, judged_by=JUDGED_BY, details=details)
