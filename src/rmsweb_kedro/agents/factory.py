"""Build the roles from configuration (``params:collect.teacher`` / ``reflector`` / ``judge``), so production swaps
an endpoint in YAML, not code.

    teacher:   {kind: scripted, imperfections: {...}}      or {kind: openai, endpoint: {...}, send_screenshot: true}
    reflector: {kind: scripted}                           or {kind: openai, endpoint: {...}}
    judge:     {kind: sandbox_checker}                    or {kind: webvoyager, endpoint: {...}, last_k: 15}
                                                          or {kind: webjudge, endpoint: {...}, score_threshold: 3}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.agents.base import Agent, Judge, Reflector
from rmsweb_kedro.agents.endpoint import ChatEndpoint, EndpointConfig
from rmsweb_kedro.agents.scripted import TeacherImperfections


class TeacherSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["scripted", "openai"] = "scripted"
    imperfections: TeacherImperfections = Field(default_factory=TeacherImperfections)
    endpoint: EndpointConfig | None = None
    send_screenshot: bool = True
    history_limit: int = 8


class ReflectorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["scripted", "openai"] = "scripted"
    endpoint: EndpointConfig | None = None


class JudgeSpecConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["sandbox_checker", "webvoyager", "webjudge"] = "sandbox_checker"
    endpoint: EndpointConfig | None = None
    last_k: int = 15  # WebVoyager's run_eval.sh attaches the last 15 screenshots
    score_threshold: int = 3  # Online-Mind2Web's WebJudge (run.py --score_threshold 3)
    max_images: int = 50  # Online-Mind2Web's WebJudge (MAX_IMAGE = 50)
    official_prompts: str | None = "data/01_raw/benchmarks"  # where `benchmarks_data download` put prompts/
    max_tokens: int | None = Field(default=None, gt=0)  # None: the protocol's own reply budget


def _endpoint(spec: Any, role: str, credentials_file: str) -> ChatEndpoint:
    if spec.endpoint is None:
        raise ValueError(f"{role}: kind {spec.kind!r} needs an 'endpoint' (base_url, model, ...)")
    return ChatEndpoint(spec.endpoint, credentials_file)


def teacher_factory(
    spec: TeacherSpec | dict, credentials_file: str = "conf/local/credentials.yml"
) -> Callable[[int], Agent]:
    """``make(seed) -> Agent``: a fresh scripted teacher per attempt seed, or one shared endpoint teacher."""
    spec = TeacherSpec.model_validate(spec)
    if spec.kind == "scripted":
        from rmsweb_kedro.agents.scripted import ScriptedTeacher

        return lambda seed: ScriptedTeacher(seed=seed, imperfections=spec.imperfections)
    from rmsweb_kedro.agents.openai_roles import OpenAITeacher

    teacher = OpenAITeacher(
        _endpoint(spec, "teacher", credentials_file), spec.send_screenshot, spec.history_limit
    )
    return lambda seed: teacher


def build_reflector(
    spec: ReflectorSpec | dict, credentials_file: str = "conf/local/credentials.yml"
) -> Reflector:
    spec = ReflectorSpec.model_validate(spec)
    if spec.kind == "scripted":
        from rmsweb_kedro.agents.scripted import ScriptedReflector

        return ScriptedReflector()
    from rmsweb_kedro.agents.openai_roles import OpenAIReflector

    return OpenAIReflector(_endpoint(spec, "reflector", credentials_file))


def build_judge(
    spec: JudgeSpecConfig | dict,
    session_state: Callable[[str], dict] | None = None,
    credentials_file: str = "conf/local/credentials.yml",
) -> Judge:
    """The judge; ``session_state`` (``SandboxServer.session_state``) is needed by the sandbox checker."""
    spec = JudgeSpecConfig.model_validate(spec)
    if spec.kind == "sandbox_checker":
        from rmsweb_kedro.agents.scripted import SandboxJudge

        if session_state is None:
            raise ValueError("judge kind 'sandbox_checker' needs the sandbox server's session_state")
        return SandboxJudge(session_state)
    from rmsweb_kedro.agents.openai_roles import WebJudge, WebVoyagerJudge

    endpoint = _endpoint(spec, "judge", credentials_file)
    budget = {"max_tokens": spec.max_tokens} if spec.max_tokens else {}
    if spec.kind == "webvoyager":
        return WebVoyagerJudge(endpoint, spec.last_k, official_prompts=spec.official_prompts, **budget)
    return WebJudge(
        endpoint, spec.score_threshold, spec.max_images, official_prompts=spec.official_prompts, **budget
    )
