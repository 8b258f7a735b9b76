"""One OpenAI-compatible chat endpoint (vLLM, SGLang, ``transformers serve``, a hosted API): configuration,
credentials, multimodal message parts, retries with backoff, token usage and cost.

Every OpenAI-compatible role (teacher, reflector, judges) talks through :class:`ChatEndpoint`, so they share one
retry policy and one cost account.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from rmsweb_kedro.contracts.schema import Usage

logger = logging.getLogger(__name__)


#: Kedro's credentials as the nodes receive them (the ``endpoint_credentials`` dataset): entry name -> API key.
Credentials = Mapping[str, SecretStr]


class EndpointConfig(BaseModel):
    """Where and how to call a model. The API key is never a parameter: ``credentials`` names an entry of Kedro's
    credentials (``conf/local/credentials.yml``: ``<name>: {api_key: ...}``), which the project hands to the nodes
    as ``endpoint_credentials`` (see :func:`resolve_api_key`). Keys are ``SecretStr``: every dump of a config
    (``model_dump``, JSON, MLflow parameters, manifests) shows ``**********``."""

    model_config = ConfigDict(extra="forbid")

    base_url: str
    model: str
    #: Only from code (a notebook, a test), as a ``SecretStr``; a plain string is refused (see the validator).
    api_key: SecretStr | None = None
    credentials: str | None = None  # the name of an entry of Kedro's credentials holding {api_key: ...}
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    backoff_s: float = Field(default=1.0, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
    temperature: float = 0.0
    max_tokens: int = Field(default=512, gt=0)
    #: US dollars per million tokens (0 for a local server).
    price_prompt_per_million: float = Field(default=0.0, ge=0)
    price_completion_per_million: float = Field(default=0.0, ge=0)
    extra_body: dict[str, Any] = Field(default_factory=dict)

    @field_validator("api_key", mode="before")
    @classmethod
    def _not_a_parameter(cls, value: Any) -> Any:
        return refuse_plain_key(
            value,
            "put it in conf/local/credentials.yml as '<name>: {api_key: ...}' and set 'credentials: <name>'",
        )


def refuse_plain_key(value: Any, instead: str) -> Any:
    """A validator's check of an ``api_key`` field: a plain string is refused (``instead`` says where the key
    goes), a ``SecretStr`` passes."""
    # Parameters are logged (MLflow) and dumped (statistics, manifests): a key written there would follow.
    if isinstance(value, str):
        raise ValueError(
            f"an API key must not be written in parameters: {instead} (or pass SecretStr(...) from code)"
        )
    return value


def endpoint_credentials(conf_creds: dict[str, Any]) -> dict[str, SecretStr]:
    """The API keys of Kedro's credentials (``conf/<env>/credentials.yml``, read by the config loader), by entry
    name: every entry ``<name>: {api_key: ...}``; other entries (e.g. MLflow's) are left out."""
    return {
        name: SecretStr(str(entry["api_key"]))
        for name, entry in conf_creds.items()
        if isinstance(entry, dict) and entry.get("api_key")
    }


def resolve_api_key(config: EndpointConfig, credentials: Credentials | None = None) -> SecretStr:
    """The API key: the config's own (code only), else ``credentials[config.credentials]`` (Kedro's credentials),
    else the environment variable ``config.api_key_env``, else ``"EMPTY"`` (local servers need none)."""
    import os

    if config.api_key is not None:
        return config.api_key
    if config.credentials:
        if not credentials or config.credentials not in credentials:
            raise KeyError(
                f"credentials {config.credentials!r}: Kedro's credentials (conf/local/credentials.yml) have no "
                f"entry '{config.credentials}: {{api_key: ...}}'"
            )
        return credentials[config.credentials]
    if config.api_key_env and os.environ.get(config.api_key_env):
        return SecretStr(os.environ[config.api_key_env])
    return SecretStr("EMPTY")


def image_part(png_path: str | Path) -> dict[str, Any]:
    """An OpenAI ``image_url`` content part carrying the PNG file inline as base64."""
    data = base64.b64encode(Path(png_path).read_bytes()).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


class EndpointError(RuntimeError):
    """The endpoint still failed after every retry; ``failures`` lists what each try got."""

    def __init__(self, message: str, failures: list[str]):
        super().__init__(message)
        self.failures = failures


@dataclass
class Choice:
    """One of a completion's ``n`` choices; ``logprobs``: per completion token, where asked for and returned."""

    text: str
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = None  # the completion's token ids, where the server returns them (vLLM)


@dataclass
class Completion:
    text: str  # the first choice's
    usage: Usage  # of the whole request (all choices)
    cost_usd: float
    failures: list[str] = field(default_factory=list)  # retried errors before this success
    choices: list[Choice] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None  # where the server returns them (vLLM's return_token_ids)


class ChatEndpoint:
    """Chat completions with retries and exponential backoff on 429, 5xx, timeouts and refused connections;
    other errors (400, 401, 404) fail at once since retrying cannot fix them."""

    def __init__(
        self,
        config: EndpointConfig,
        credentials: Credentials | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.config = config
        self._sleep = sleep
        self._api_key = resolve_api_key(config, credentials)  # a SecretStr, also when pickled for Ray
        self._connect()

    def _connect(self) -> None:
        from openai import OpenAI

        # The client's own retries are off: this class retries, so every failure is counted and logged.
        self._client = OpenAI(
            base_url=self.config.base_url,
            api_key=self._api_key.get_secret_value(),
            timeout=self.config.timeout_s,
            max_retries=0,
        )

    # An endpoint travels to Ray actors (rollouts) by pickle; the HTTP client (locks, sockets) is rebuilt there.
    def __getstate__(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "_client"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._connect()

    def cost(self, usage: Usage) -> float:
        """US dollars for ``usage`` at this endpoint's prices."""
        c = self.config
        return (
            usage.prompt_tokens * c.price_prompt_per_million
            + usage.completion_tokens * c.price_completion_per_million
        ) / 1e6

    def complete(
        self,
        messages: list[dict[str, Any]],
        max_tokens: int | None = None,
        *,
        n: int = 1,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        logprobs: bool = False,
    ) -> Completion:
        """One chat completion's text(s) and usage: ``n`` choices, at ``temperature`` (default: the config's),
        ``top_p`` and ``seed`` where given, with each choice's token log-probabilities when ``logprobs`` (servers
        that do not return them leave ``Choice.logprobs`` None). Raises :class:`EndpointError` when every try
        failed."""
        import openai

        sampling: dict[str, Any] = {
            "temperature": self.config.temperature if temperature is None else temperature
        }
        if n != 1:
            sampling["n"] = n
        if top_p is not None:
            sampling["top_p"] = top_p
        if seed is not None:
            sampling["seed"] = seed
        if logprobs:
            sampling["logprobs"] = True

        retryable = (
            openai.RateLimitError,
            openai.InternalServerError,
            openai.APITimeoutError,
            openai.APIConnectionError,
        )
        failures: list[str] = []
        for attempt in range(self.config.max_retries + 1):
            try:
                response = self._client.chat.completions.create(
                    model=self.config.model,
                    messages=messages,
                    max_tokens=max_tokens or self.config.max_tokens,
                    **sampling,
                    extra_body=self.config.extra_body or None,
                )
            except openai.APIStatusError as err:
                failures.append(f"HTTP {err.status_code}: {str(err)[:200]}")
                if not isinstance(err, retryable) and err.status_code < 500:
                    raise EndpointError(f"{self.config.base_url}: {failures[-1]}", failures) from err
            except retryable as err:
                failures.append(f"{type(err).__name__}: {str(err)[:200]}")
            else:
                choices = [_choice(c) for c in response.choices or []]
                raw_usage = response.usage
                usage = Usage(
                    prompt_tokens=getattr(raw_usage, "prompt_tokens", 0) or 0,
                    completion_tokens=getattr(raw_usage, "completion_tokens", 0) or 0,
                )
                text = choices[0].text if choices else ""
                prompt_ids = getattr(response, "prompt_token_ids", None)
                return Completion(text, usage, self.cost(usage), failures, choices, prompt_ids)
            if attempt < self.config.max_retries:
                delay = min(self.config.backoff_max_s, self.config.backoff_s * 2**attempt)
                logger.warning(
                    "%s: %s; retry %d in %.1f s", self.config.base_url, failures[-1], attempt + 1, delay
                )
                self._sleep(delay)
        raise EndpointError(
            f"{self.config.base_url}: failed {len(failures)} times; last: {failures[-1]}", failures
        )


def _choice(choice: Any) -> Choice:
    """A response choice as a :class:`Choice` (vLLM's and OpenAI's ``logprobs.content[i].logprob``)."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    return Choice(
        text=choice.message.content or "",
        logprobs=[entry.logprob for entry in content] if content else None,
        finish_reason=choice.finish_reason,
        token_ids=getattr(choice, "token_ids", None),  # vLLM's, with return_token_ids (an extra field)
    )
