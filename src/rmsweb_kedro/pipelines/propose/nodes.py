"""Nodes of the propose pipeline, over :mod:`rmsweb_kedro.tasks.proposer`."""

from __future__ import annotations

from typing import Any

from rmsweb_kedro.models.endpoint import Credentials
from rmsweb_kedro.tasks.proposer import ProposerParams, propose, to_jsonl


def propose_tasks(
    params: dict[str, Any], credentials: Credentials | None = None
) -> tuple[str, dict[str, Any]]:
    """The kept proposed tasks as JSON lines (``proposed_tasks``, read by the tasks stage's ``proposer`` source)
    and the report: proposed, kept and dropped per filter, per site, every dropped task with its reason."""
    tasks, report = propose(ProposerParams.model_validate(params), credentials)
    return to_jsonl(tasks), report
