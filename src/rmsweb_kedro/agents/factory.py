"""Build the roles from configuration (``params:collect.teacher`` / ``reflector``; the judge is built by
:mod:`rmsweb_kedro.judges.choice`), so production swaps an endpoint in YAML, not code.

    teacher:   {kind: scripted, imperfections: {...}}      or {kind: openai, endpoint: {...}, send_screenshot: true}
                                                          or {kind: policy, policy: {...}, checkpoint: DIR}
    reflector: {kind: scripted}                           or {kind: openai, endpoint: {...}}
    policy:    {kind: hf, dtype: auto, device: auto}       or {kind: openai, endpoint: {...}, tokenizer: DIR}
                                                          or {kind: openai, server: {python: ..., ...}}

The policy (the model being trained, probed and evaluated) has the same two kinds everywhere it is used (mining,
evaluate offline and online, live, a model teacher): ``hf``, the checkpoint in this process, or ``openai``, the
same checkpoint served by vLLM, SGLang or ``transformers serve``: at ``endpoint`` (a server you run) or, in mining
and evaluate, on a vLLM server the stage starts for the checkpoint it scores and stops after (``server``;
:func:`managed_policy`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rmsweb_kedro.agents.base import Agent, Policy, Reflector
from rmsweb_kedro.agents.scripted import TeacherImperfections
from rmsweb_kedro.models.endpoint import ChatEndpoint, Credentials, EndpointConfig
from rmsweb_kedro.models.serving import ServerConfig, serve_checkpoint


class PolicySpec(BaseModel):
    """``policy:``: which policy acts and how it is reached. ``prompt`` must be what the checkpoint was trained with
    (every stage's ``policy.prompt`` is ``${globals:policy_prompt}``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["hf", "openai"] = "hf"
    prompt: dict[str, Any] = Field(default_factory=dict)  # prompts.PromptConfig fields
    max_new_tokens: int = Field(default=40, gt=0)
    batch_size: int = Field(
        default=16, gt=0, description="hf: sequences a generate call; openai: requests at once"
    )
    dtype: str = "auto"  # hf: modeling.resolve_dtype (auto: bf16 on an accelerator, float32 on the CPU)
    device: str = "auto"  # hf: modeling.resolve_device (auto: the GPU when there is one)
    endpoint: EndpointConfig | None = None  # openai: base_url, model (the served name), retries, ...
    #: openai: a directory holding the checkpoint's tokenizer, so the page tree is cut to its token budget exactly
    #: as in training (null: 4 characters a token).
    tokenizer: str | None = None
    #: openai, in mining and evaluate: the vLLM server the stage starts for the checkpoint it scores (``python``:
    #: vLLM's venv; serving.ServerConfig), instead of ``endpoint``; the tokenizer is then the checkpoint's. The served
    #: name is the stage's (the model label; ``sft`` in mining) and requests at once ``batch_size``: the block's
    #: ``model`` and ``concurrency`` are the Salvage-DS sampler's only.
    server: ServerConfig | None = None

    @model_validator(mode="after")
    def _one_server(self) -> PolicySpec:
        if self.server is not None and (self.kind != "openai" or self.endpoint is not None):
            raise ValueError(
                "policy.server (a vLLM server the stage starts) needs kind: openai and no endpoint (the endpoint "
                "is the started server's); for a server you run, set endpoint and drop server"
            )
        return self


class TeacherSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: scripted: the sandbox teacher; openai: a general model with the teacher prompt; policy: a trained policy
    #: checkpoint (``policy``: in this process or served) acting with its own training prompt.
    kind: Literal["scripted", "openai", "policy"] = "scripted"
    imperfections: TeacherImperfections = Field(default_factory=TeacherImperfections)
    endpoint: EndpointConfig | None = None
    send_screenshot: bool = True
    history_limit: int = 8
    policy: PolicySpec | None = None
    checkpoint: str | None = None  # kind policy, policy.kind hf: the checkpoint directory


class ReflectorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["scripted", "openai"] = "scripted"
    endpoint: EndpointConfig | None = None


def role_endpoint(spec: Any, role: str, credentials: Credentials | None) -> ChatEndpoint:
    """A client of ``spec.endpoint`` for ``role``; an error naming the role when the spec has none."""
    if spec.endpoint is None:
        raise ValueError(f"{role}: kind {spec.kind!r} needs an 'endpoint' (base_url, model, ...)")
    return ChatEndpoint(spec.endpoint, credentials)


def teacher_factory(
    spec: TeacherSpec | dict, credentials: Credentials | None = None
) -> Callable[[int], Agent]:
    """``make(seed) -> Agent``: a fresh scripted teacher per attempt seed, or one shared endpoint teacher."""
    spec = TeacherSpec.model_validate(spec)
    if spec.kind == "scripted":
        from rmsweb_kedro.agents.scripted import ScriptedTeacher

        return lambda seed: ScriptedTeacher(seed=seed, imperfections=spec.imperfections)
    if spec.kind == "policy":
        if spec.policy is None:
            raise ValueError("teacher: kind 'policy' needs a 'policy' ({kind: hf|openai, ...})")
        policy = build_policy(spec.policy, spec.checkpoint, credentials=credentials)
        return lambda seed: policy
    from rmsweb_kedro.agents.openai_roles import OpenAITeacher

    teacher = OpenAITeacher(
        role_endpoint(spec, "teacher", credentials), spec.send_screenshot, spec.history_limit
    )
    return lambda seed: teacher


def build_reflector(spec: ReflectorSpec | dict, credentials: Credentials | None = None) -> Reflector:
    spec = ReflectorSpec.model_validate(spec)
    if spec.kind == "scripted":
        from rmsweb_kedro.agents.scripted import ScriptedReflector

        return ScriptedReflector()
    from rmsweb_kedro.agents.openai_roles import OpenAIReflector

    return OpenAIReflector(role_endpoint(spec, "reflector", credentials))


def build_policy(
    spec: PolicySpec | dict,
    checkpoint: Any = None,
    *,
    prompt: dict[str, Any] | None = None,
    greedy: bool = True,
    temperature: float = 1.0,
    top_p: float = 1.0,
    credentials: Credentials | None = None,
) -> Policy:
    """The policy ``spec`` asks for. ``hf``: over ``checkpoint``, a checkpoint dataset's value (a directory path or
    a ``(model, processor)`` pair); ``openai``: the served model at ``spec.endpoint`` (``checkpoint`` is not
    loaded). ``prompt`` (default ``spec.prompt``), ``greedy``, ``temperature`` and ``top_p`` are how it acts;
    ``credentials``: Kedro's, when the endpoint names an entry."""
    spec = PolicySpec.model_validate(spec)
    if spec.server is not None:
        raise ValueError(
            "policy.server: only the mining and evaluate stages start a server for the policy (managed_policy); "
            "here, serve the checkpoint yourself and set policy.endpoint"
        )
    settings = {
        "prompt": spec.prompt if prompt is None else prompt,
        "greedy": greedy,
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": spec.max_new_tokens,
    }
    if spec.kind == "openai":
        from rmsweb_kedro.agents.openai_policy import OpenAIPolicy

        tokenizer = None
        if spec.tokenizer:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(spec.tokenizer)
        endpoint = role_endpoint(spec, "policy", credentials)
        return OpenAIPolicy(endpoint, tokenizer=tokenizer, concurrency=spec.batch_size, **settings)
    from rmsweb_kedro.agents.hf_policy import HFPolicy

    if isinstance(checkpoint, tuple):
        from rmsweb_kedro.models.modeling import place_model

        model, processor = checkpoint
        return HFPolicy(place_model(model, spec.device), processor, batch_size=spec.batch_size, **settings)
    if checkpoint is None or not Path(str(checkpoint)).is_dir():
        raise ValueError(
            f"policy kind 'hf' needs a checkpoint directory or a (model, processor) pair, got {checkpoint!r}"
        )
    return HFPolicy.from_pretrained(
        str(checkpoint), dtype=spec.dtype, device=spec.device, batch_size=spec.batch_size, **settings
    )


@contextmanager
def managed_policy(
    spec: PolicySpec, checkpoint: Any, *, name: str, log_path: str | Path, where: str
) -> Iterator[tuple[PolicySpec, Any]]:
    """``(spec, checkpoint)`` to build the policy from (:func:`build_policy`) while the ``with`` block runs. With
    ``spec.server``, the checkpoint (a checkpoint dataset's value) is served by a vLLM server started now and
    stopped at the block's end, even on error (serving.serve_checkpoint: log at ``log_path``; ``where``: the
    parameter block, e.g. ``evaluate.policy.server``, for errors), and the spec is an ``openai`` one pointed at it
    (served name ``name``; the checkpoint's tokenizer cuts page trees unless ``spec.tokenizer`` names one).
    Without, both as given."""
    if spec.server is None:
        yield spec, checkpoint
        return
    config = spec.server
    with serve_checkpoint(config, checkpoint, name, log_path, where) as server:
        endpoint = EndpointConfig(
            base_url=server.base_url,
            model=name,
            api_key=server.api_key,  # the server's fresh key (or the configured one)
            api_key_env=None,
            timeout_s=config.request_timeout_s,
            max_retries=config.max_retries,
        )
        tokenizer = spec.tokenizer or str(server.checkpoint)
        yield spec.model_copy(update={"server": None, "endpoint": endpoint, "tokenizer": tokenizer}), None
