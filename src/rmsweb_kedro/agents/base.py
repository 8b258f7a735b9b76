"""The role protocols every implementation (scripted, OpenAI-compatible, local Hugging Face) follows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from rmsweb_kedro.actions import Action
from rmsweb_kedro.schema import Observation, Step, Task, Usage, Verdict


@dataclass
class Decision:
    """What an acting role returns for one step. ``action`` is None when its output did not parse; then
    ``error`` says why and ``raw_output`` keeps the text."""

    action: Action | None
    thought: str | None = None
    raw_output: str = ""
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    #: True when the role produced no output at all (its endpoint still failed after its retries): the episode
    #: ends with termination "model_error" instead of going on.
    fatal: bool = False
    #: Cost of this decision in US dollars (endpoint prices per million tokens; 0 for local or scripted roles).
    cost_usd: float = 0.0


class Agent(Protocol):
    """Acts: observation + history (+ reflections from earlier failed attempts) -> thought + action."""

    name: str

    def act(
        self, task: Task, observation: Observation, history: list[Step], reflections: list[str]
    ) -> Decision: ...


class Reflector(Protocol):
    """A failed attempt and the judge's verdict -> a reflection in natural language."""

    name: str

    def reflect(
        self, task: Task, steps: list[Step], verdict: Verdict, final_answer: str | None
    ) -> tuple[str, Usage]: ...


class Judge(Protocol):
    """A finished attempt -> success/failure with a reason (and the judge's identity in the verdict)."""

    name: str

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]: ...
