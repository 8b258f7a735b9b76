"""Critical points: the steps an agent must not take on its own on a live site, one definition for the episodes that
stop before them and for the task proposer that drops tasks asking for them."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.contracts.schema import Observation
from rmsweb_kedro.episodes.episode import target_element


class CriticalPoints(BaseModel):
    """Live sites: the steps an agent must not take on its own (pay, place an order, submit personal data, send a
    message, delete, book), the convention of current web-agent benchmarks. An episode stops *before* such a step
    with ``termination="critical_point"``; the step is recorded (not performed) and the reason is in the metadata.

    A step is critical when it clicks an element whose accessible name contains one of ``commit_words`` (whole
    words, any case), or submits a form (``type(..., submit=True)``, pressing Enter) on a page that has such an
    element or a field named by ``personal_data_words``."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    commit_words: list[str] = Field(
        default_factory=lambda: [
            "pay", "pay now", "place order", "confirm order", "submit order", "complete order", "buy",
            "buy now", "purchase", "complete purchase", "checkout and pay", "send", "send message", "post",
            "publish", "submit", "delete", "remove account", "book now", "confirm booking", "reserve",
            "subscribe", "sign up", "register", "donate", "transfer",
        ]
    )  # fmt: skip
    personal_data_words: list[str] = Field(
        default_factory=lambda: [
            "card number", "credit card", "cvv", "cvc", "password", "social security", "passport", "iban",
            "phone", "date of birth",
        ]
    )  # fmt: skip

    def _pattern(self, words: list[str]) -> re.Pattern[str]:
        alternatives = "|".join(re.escape(w.lower()).replace(r"\ ", r"\s+") for w in words)
        return re.compile(rf"\b(?:{alternatives})\b")

    def in_text(self, text: str) -> str | None:
        """Why a task text asks for a critical step (the task proposer drops such tasks), or None."""
        lowered = text.lower()
        if match := self._pattern(self.personal_data_words).search(lowered):
            return f'asks for personal data ("{match.group(0)}")'
        if match := self._pattern(self.commit_words).search(lowered):
            return f'asks for an irreversible step ("{match.group(0)}")'
        return None

    def __call__(self, action: Action, observation: Observation) -> str | None:
        """Why ``action`` on this page is a critical point, or None."""
        if not self.enabled:
            return None
        commit, personal = self._pattern(self.commit_words), self._pattern(self.personal_data_words)
        if action.type == ActionType.CLICK:
            element = target_element(action, observation)
            if element is not None and commit.search(element.name.lower()):
                return f'clicking {element.role} "{element.name}" would commit an irreversible change'
            return None
        submits = (action.type == ActionType.TYPE and action.submit) or (
            action.type == ActionType.PRESS and (action.key or "").lower() == "enter"
        )
        if not submits:
            return None
        for element in observation.elements:
            if element.role == "button" and commit.search(element.name.lower()):
                return f'submitting a form on a page with {element.role} "{element.name}"'
            if element.role == "textbox" and personal.search(element.name.lower()):
                return f'submitting a form with personal data ("{element.name}")'
        return None
