"""Which judge judges what: the stage's judge from configuration (:class:`JudgeSpecConfig`, :func:`build_judge`)

    judge: {kind: sandbox_checker}
           or {kind: webvoyager, endpoint: {...}, last_k: 15}
           or {kind: webjudge, endpoint: {...}, score_threshold: 3}
           or {kind: rubric, endpoint: {...}, rubric_threshold: 0.8}
           or {kind: reference_answer}

and the judge of each task, by what the task carries: the one place collect, mining's online probes, evaluate's
online episodes and ``live`` get their judge from (:func:`judge_factory`, :class:`JudgeByKind`).

Which judge (:func:`judge_kind`, the one place the choice is made), given the stage's configured judge (``judge:``,
a :class:`~rmsweb_kedro.judges.choice.JudgeSpecConfig`):

- a sandbox task (``sandbox_checker``) gets the configured judge: the sandbox checker by default, an LLM judge when
  the configuration names one (a judge-agreement or production run judging sandbox episodes by WebJudge);
- a benchmark task names its benchmark's protocol (``webvoyager``, ``webjudge``, WebTailBench's ``rubric``, GAIA's
  ``reference_answer``) and gets that judge, over the configured endpoint (``endpoints`` may name another per kind:
  the benchmarks ask for different judge models);
- any other task (``none``: a task file's or the proposer's) is judged by what it carries: a rubric beside a
  reference answer, or a rubric of facts that must all hold (``rubric_rule: every_fact``, WebGym's), gets the
  WebGym composite (``webgym``: the answer supported by the screenshots, every fact verified, the reference answer
  matched; :class:`~rmsweb_kedro.judges.rubric.WebGymJudge`); a rubric alone the rubric judge; a reference
  answer alone the reference-answer judge; nothing the stage's configured LLM judge (``webvoyager`` or
  ``webjudge``). A stage whose judge is the sandbox checker cannot judge such a task: an error says what to set.

A reference answer is matched exactly (GAIA's protocol) unless the configuration says ``reference_answer: llm``:
then the endpoint's model reads the final answer against it (``answer_judge.LLMAnswerJudge``).

The sandbox checker judges sandbox tasks only. An LLM judge whose endpoint still fails after its retries (or, for the
rubric judge, whose replies stay unusable) marks its verdict ``details["judge_error"]``; ``episodes.episode.run_episode``
records such an attempt as ``termination="judge_error"`` with no verdict: counted apart, never the agent's failure.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.agents.base import Judge
from rmsweb_kedro.agents.factory import role_endpoint
from rmsweb_kedro.contracts.schema import EVERY_FACT, Step, Task, Usage, Verdict
from rmsweb_kedro.judges.llm import OFFICIAL_PROMPTS_DIR, WebJudge, WebVoyagerJudge
from rmsweb_kedro.models.endpoint import ChatEndpoint, Credentials, EndpointConfig

#: The judges a task may name for itself (its benchmark's protocol).
TASK_JUDGE_KINDS = ("webvoyager", "webjudge", "rubric", "reference_answer")
#: The judges a stage may configure for tasks without a programmatic checker.
LLM_JUDGE_KINDS = ("webvoyager", "webjudge")


class JudgeSpecConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["sandbox_checker", "webvoyager", "webjudge", "rubric", "reference_answer"] = (
        "sandbox_checker"
    )
    endpoint: EndpointConfig | None = None
    last_k: int = 15  # WebVoyager's run_eval.sh attaches the last 15 screenshots
    score_threshold: int = 3  # Online-Mind2Web's WebJudge (run.py --score_threshold 3)
    max_images: int = 50  # Online-Mind2Web's WebJudge (MAX_IMAGE = 50)
    official_prompts: str | None = OFFICIAL_PROMPTS_DIR  # where `tasks.benchmarks download` put prompts/
    max_tokens: int | None = Field(default=None, gt=0)  # None: the protocol's own reply budget
    rubric_threshold: float = Field(default=0.8, gt=0, le=1)  # WebTailBench: success when earned/total >= it
    #: reference_answer tasks: ``exact`` (GAIA's exact match, no model) or ``llm`` (the endpoint's model reads the
    #: final answer against the reference: answers in other words, as task files and the proposer give them)
    reference_answer: Literal["exact", "llm"] = "exact"


def build_judge(
    spec: JudgeSpecConfig | dict,
    session_state: Callable[[str], dict] | None = None,
    credentials: Credentials | None = None,
    endpoint: ChatEndpoint | None = None,
) -> Judge:
    """The judge ``spec.kind`` names: the sandbox checker (needs ``session_state``, ``SandboxServer.session_state``),
    GAIA's exact answer match (no model), or an LLM judge over ``endpoint`` (else a client of ``spec.endpoint``)."""
    spec = JudgeSpecConfig.model_validate(spec)
    if spec.kind == "sandbox_checker":
        from rmsweb_kedro.judges.sandbox import SandboxJudge

        if session_state is None:
            raise ValueError("judge kind 'sandbox_checker' needs the sandbox server's session_state")
        return SandboxJudge(session_state)
    if spec.kind == "reference_answer":
        from rmsweb_kedro.judges.answer import ExactAnswerJudge, LLMAnswerJudge

        if spec.reference_answer == "llm":
            return LLMAnswerJudge(endpoint or role_endpoint(spec, "judge", credentials))
        return ExactAnswerJudge()
    endpoint = endpoint or role_endpoint(spec, "judge", credentials)
    if spec.kind == "rubric":
        from rmsweb_kedro.judges.rubric import RubricJudge

        return RubricJudge(endpoint, threshold=spec.rubric_threshold)
    budget = {"max_tokens": spec.max_tokens} if spec.max_tokens else {}
    if spec.kind == "webvoyager":
        return WebVoyagerJudge(endpoint, spec.last_k, official_prompts=spec.official_prompts, **budget)
    return WebJudge(
        endpoint, spec.score_threshold, spec.max_images, official_prompts=spec.official_prompts, **budget
    )


def judge_kind(task: Task, configured: str) -> str:
    """The judge kind that judges ``task`` when the stage's configured judge is ``configured`` (module docstring)."""
    kind = task.judge.kind
    if kind == "sandbox_checker":
        return configured
    if kind in TASK_JUDGE_KINDS:
        return kind
    config = task.judge.config
    rubric = bool(config.get("rubric"))
    answer = config.get("reference_answer") not in (None, "")
    if rubric and (answer or config.get("rubric_rule") == EVERY_FACT):
        return "webgym"
    if rubric:
        return "rubric"
    if answer:
        return "reference_answer"
    if configured in LLM_JUDGE_KINDS:
        return configured
    raise ValueError(
        f"task {task.id!r} carries no rubric or reference answer, and the stage's judge {configured!r} cannot "
        f"judge it: set the stage's judge.kind to one of {list(LLM_JUDGE_KINDS)} with an endpoint"
    )


class JudgeByKind:
    """The :class:`~rmsweb_kedro.agents.base.Judge` of every task (:func:`judge_kind`), each kind built once by
    :func:`~rmsweb_kedro.judges.choice.build_judge` from ``spec`` (its endpoint, thresholds, official prompts).
    ``session_state``: the sandbox server's (``SandboxServer.session_state``), None where no sandbox is served;
    ``endpoint`` serves every LLM judge unless ``endpoints`` names one for its kind (else ``spec.endpoint``)."""

    name = "judges-by-task-kind"

    def __init__(
        self,
        spec: JudgeSpecConfig | dict,
        session_state: Callable[[str], dict] | None = None,
        credentials: Credentials | None = None,
        endpoint: ChatEndpoint | None = None,
        endpoints: dict[str, ChatEndpoint] | None = None,
    ):
        self.spec = JudgeSpecConfig.model_validate(spec)
        self.session_state = session_state
        self.credentials = credentials
        self.endpoint = endpoint
        self.endpoints = endpoints or {}
        self._judges: dict[str, Judge] = {}
        self._last = threading.local()  # the judge of this thread's last verdict, for cost_of

    def for_task(self, task: Task) -> Judge:
        return self._of_kind(judge_kind(task, self.spec.kind), task)

    def _of_kind(self, kind: str, task: Task) -> Judge:
        if kind == "webgym" and kind not in self._judges:
            from rmsweb_kedro.judges.rubric import WebGymJudge

            rubric, answer = self._of_kind("rubric", task), self._of_kind("reference_answer", task)
            self._judges[kind] = WebGymJudge(rubric, answer)  # type: ignore[arg-type]
        if kind not in self._judges:
            if kind == "sandbox_checker" and self.session_state is None:
                raise ValueError(
                    f"task {task.id!r} is a sandbox task but no sandbox server runs for it: give the stage its "
                    "sandbox_seed, or configure an LLM judge (judge.kind webjudge with an endpoint)"
                )
            endpoint = self.endpoints.get(kind, self.endpoint)
            exact = kind == "reference_answer" and self.spec.reference_answer == "exact"
            if kind != "sandbox_checker" and not exact and endpoint is None and not self.spec.endpoint:
                raise ValueError(
                    f"task {task.id!r} (judge kind {task.judge.kind!r}) is judged by the LLM judge {kind!r}, but "
                    "the stage's judge has no endpoint: set judge.endpoint {base_url, model, credentials}"
                )
            spec = self.spec.model_copy(update={"kind": kind})
            self._judges[kind] = build_judge(spec, self.session_state, self.credentials, endpoint)
        return self._judges[kind]

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]:
        judge = self.for_task(task)
        self._last.judge = judge
        return judge.judge(task, steps, final_answer, context)

    def cost_of(self, usage: Usage) -> float:
        judge = getattr(self._last, "judge", None)
        return getattr(judge, "cost_of", lambda _usage: 0.0)(usage)


def _judges_for(
    spec: JudgeSpecConfig, credentials: Credentials | None, endpoints: dict[str, EndpointConfig], server: Any
) -> JudgeByKind:
    endpoint_for = {kind: ChatEndpoint(config, credentials) for kind, config in endpoints.items()}
    session_state = server.session_state if server is not None else None
    return JudgeByKind(spec, session_state, credentials, endpoints=endpoint_for)


def judge_factory(
    spec: JudgeSpecConfig | dict,
    credentials: Credentials | None = None,
    endpoints: dict[str, Any] | None = None,
) -> Callable[[Any], JudgeByKind]:
    """``Roles.judge``: ``make(server) -> JudgeByKind`` (``server``: the sandbox server of the browser, or None),
    built where the browser runs (a thread or a Ray actor, so it pickles). ``endpoints``: an
    :class:`~rmsweb_kedro.models.endpoint.EndpointConfig` per judge kind that needs its own model."""
    per_kind = {kind: EndpointConfig.model_validate(config) for kind, config in (endpoints or {}).items()}
    return functools.partial(_judges_for, JudgeSpecConfig.model_validate(spec), credentials, per_kind)
