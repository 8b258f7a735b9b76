"""The one home of a task's rubric: its item shape (:class:`RubricItem`), the normalising of every published rubric
shape into those items (:func:`normalise_rubric`), and the judge config entries that carry it with its total points
(:func:`rubric_config`).

Its producers: task files (:mod:`rmsweb_kedro.tasks.files`), WebTailBench
(:mod:`rmsweb_kedro.tasks.benchmarks.loaders`) and the proposer (:mod:`rmsweb_kedro.tasks.proposer`). Its reader:
:mod:`rmsweb_kedro.judges.rubric` scores the items of ``task.judge.config["rubric"]`` (over the criteria that
apply, so it sums its own total rather than reading ``total_points``), and ``judges.choice`` reads ``rubric_rule``.
It imports nothing of the project above ``contracts``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.contracts.schema import EVERY_FACT


class RubricItem(BaseModel):
    """One criterion of a rubric: what must hold, how it is described, the points it is worth and, optionally, the
    condition under which it applies (WebTailBench's shape)."""

    # Upstream files may grow new columns; they are not errors. Whitespace around text (a trailing "\r") is.
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True, populate_by_name=True)

    criterion: Annotated[str, Field(min_length=1)]
    description: str = ""
    max_points: float = Field(gt=0)
    condition: str | None = None


def criterion(text: str, description: str = "", points: float = 1.0) -> dict[str, Any]:
    """A rubric item as the judge config carries it (its criterion stripped)."""
    return {"criterion": text.strip(), "description": description, "max_points": points}


def normalise_rubric(value: Any) -> list[dict[str, Any]] | None:
    """A list of criteria, or a JSON text of one (AReaL's loader stores WebGym's list as JSON text): texts,
    ``{criterion, description, max_points}`` (WebTailBench), ``{description, difficulty}`` (WebGym) or WebGym's
    fact groups ``{id, description, facts: [...]}``, each fact one criterion named ``[Group <id>: <description>]
    <fact>`` as WebGym's ``_prepare_tasks`` flattens them. Each criterion is worth 1 point unless it says
    otherwise. None for no rubric (None, blank text, empty list); ValueError for what is not a rubric."""
    if value is None or (isinstance(value, str) and not value.strip()) or value == []:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = [value]
    if isinstance(value, dict):
        value = value.get("items", [value])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ValueError(f"expected a list of criteria, got {type(value).__name__}")
    items = []
    for item in value:
        if isinstance(item, dict) and isinstance(item.get("facts"), list):
            group = f"[Group {item.get('id', '')}: {item.get('description', '')}]"
            items += [criterion(f"{group} {fact}") for fact in item["facts"] if str(fact).strip()]
        elif isinstance(item, str) and item.strip():
            items.append(criterion(item))
        elif isinstance(item, dict) and str(item.get("criterion") or item.get("description") or "").strip():
            named = bool(str(item.get("criterion") or "").strip())
            points = float(item.get("max_points", 1.0))
            text = str(item["criterion"] if named else item["description"]).strip()
            if points <= 0:
                raise ValueError(f"criterion {text!r}: max_points must be > 0, got {points}")
            items.append(criterion(text, str(item.get("description", "")) if named else "", points))
        else:
            raise ValueError(
                f"a criterion must be a text or an object with 'criterion' or 'description', got {item!r}"
            )
    return items or None


def rubric_config(items: list[dict[str, Any]], every_fact: bool = False) -> dict[str, Any]:
    """The judge config entries that carry a rubric, in this order: ``rubric`` (the items), ``total_points`` (the
    sum of their ``max_points``) and, for a rubric of facts that must all hold, ``rubric_rule: every_fact``."""
    config: dict[str, Any] = {"rubric": items, "total_points": sum(item["max_points"] for item in items)}
    if every_fact:
        config["rubric_rule"] = EVERY_FACT
    return config
