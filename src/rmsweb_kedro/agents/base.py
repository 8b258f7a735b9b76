"""The role protocols every implementation (scripted, OpenAI-compatible, local Hugging Face) follows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from rmsweb_kedro.contracts.actions import Action, ActionParseError, parse_reply
from rmsweb_kedro.contracts.schema import Observation, Step, Task, Usage, Verdict


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
    #: Other actions that do what ``action`` does at this state, when the role can establish them (the sandbox
    #: teacher: its reference step's declared equivalents); recorded as ``Step.equivalent_actions``.
    equivalents: list[Action] = field(default_factory=list)


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


@dataclass
class PolicySample:
    """One reply of a policy to one state. ``logprobs[i]`` is log pi(completion token i | prompt, earlier tokens)
    under the model itself (temperature 1, no top-p) for a local policy, as the server reports it for a served one;
    empty when not asked for or not returned. Token ids are empty where the policy does not see them (a server);
    ``fatal`` marks a reply that never came (the endpoint still failed after its retries): ``error`` says why, and
    it is the environment's failure, not the policy's."""

    text: str
    thought: str | None
    action: Action | None
    error: str | None
    prompt_ids: list[int] = field(default_factory=list, repr=False)
    completion_ids: list[int] = field(default_factory=list, repr=False)
    logprobs: list[float] = field(default_factory=list, repr=False)
    prompt_tokens: int | None = None  # None: len(prompt_ids)
    completion_tokens: int | None = None  # None: len(completion_ids)
    fatal: bool = False
    cost_usd: float = 0.0

    def __post_init__(self) -> None:
        if self.prompt_tokens is None:
            self.prompt_tokens = len(self.prompt_ids)
        if self.completion_tokens is None:
            self.completion_tokens = len(self.completion_ids)


def parse_sample(text: str) -> tuple[str | None, Action | None, str | None]:
    """``(thought, action, error)`` of a reply's text; the action is None (and the error says why) unless the text
    is exactly one valid reply. Never raises, whatever the text holds."""
    try:
        thought, action = parse_reply(text)
        return thought, action, None
    except ActionParseError as err:
        return None, None, err.reason


class Policy(Agent, Protocol):
    """An agent that can also reply to many STATE rows at once: ``n`` replies per state, greedy or sampled
    (temperature + top-p), reproducible with ``seed``. Two kinds: ``hf`` (agents.hf_policy.HFPolicy, a local
    checkpoint) and ``openai`` (agents.openai_policy.OpenAIPolicy, a served one); agents.factory.build_policy
    makes either from a ``policy:`` spec."""

    def sample(
        self,
        states: list[dict[str, Any]],
        n: int = 1,
        greedy: bool | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_new_tokens: int | None = None,
        seed: int | None = None,
        logprobs: bool = True,
    ) -> list[list[PolicySample]]: ...


def act_by_sampling(
    policy: Policy, task: Task, observation: Observation, history: list[Step], reflections: list[str]
) -> Decision:
    """A policy's ``act``: one reply (the policy's own greedy or sampled setting) to the live state
    (``prompts.state_from_live``) as a :class:`Decision`."""
    from rmsweb_kedro.contracts.prompts import state_from_live

    state = state_from_live(task, observation, history, reflections)
    sample = policy.sample([state], n=1, logprobs=False)[0][0]
    usage = Usage(prompt_tokens=sample.prompt_tokens or 0, completion_tokens=sample.completion_tokens or 0)
    return Decision(
        sample.action, sample.thought, sample.text, sample.error, usage, sample.fatal, sample.cost_usd
    )
