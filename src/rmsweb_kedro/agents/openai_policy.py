"""OpenAIPolicy: the policy checkpoint served by any OpenAI-compatible server (vLLM, SGLang, ``transformers
serve``): the ``openai`` kind of :class:`agents.base.Policy` (``hf`` is :class:`agents.hf_policy.HFPolicy`).

It shows the model exactly what the local policy shows it: the messages of :func:`prompts.build_messages` (the
module SFT trains with), screenshots as base64 ``image_url`` parts, the page tree cut to its token budget with the
checkpoint's own tokenizer when ``tokenizer`` names it (else at 4 characters a token). Each state is one chat
request for its ``n`` replies (``temperature: 0`` when greedy; ``seed + i`` for the i-th state when seeded);
requests run ``concurrency`` at a time through the teacher's client (:class:`models.endpoint.ChatEndpoint`: its
retries, usage and cost). A server that ignores ``n`` (``transformers serve`` answers one choice and logs "Ignoring
unsupported fields {'n'}") gets the remaining replies as requests of their own, each seeded apart (logged once), so a
K-sample scoring works against it too. A reply is parsed from its raw text and never raises: whatever the server returns (a lone
surrogate from a JSON ``\\udcff`` escape, NUL bytes, a 100k-character reply) ends as a parse error with a reason,
and the text is kept printable (``backslashreplace``) so tables can store it. A request that still fails after
the retries gives ``fatal`` samples (the environment's failure, never the policy's).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rmsweb_kedro.agents.base import Decision, PolicySample, act_by_sampling, parse_sample
from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages
from rmsweb_kedro.contracts.schema import Observation, Step, Task
from rmsweb_kedro.models.endpoint import (
    ChatEndpoint,
    Choice,
    Completion,
    EndpointError,
    image_part,
    text_part,
)

logger = logging.getLogger(__name__)

#: The i-th extra request of a state (a server that ignores n) draws with its seed + i * SEED_STRIDE, apart from
#: the seeds of the other states of a call (seed + state index).
SEED_STRIDE = 100_003
_NOTE_LOCK = threading.Lock()  # module-level: a policy travels to Ray actors by pickle, a lock cannot


def printable(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (lone surrogates) written as backslash escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _sample(completion: Completion, choice: Choice) -> PolicySample:
    """One reply as a sample: parsed from its raw text, with its token ids and log-probabilities where the server
    returns them (vLLM: ``return_token_ids`` in the endpoint's ``extra_body``)."""
    thought, action, error = parse_sample(choice.text.strip())
    logprobs = choice.logprobs or []
    shared = max(1, len(completion.choices))  # a request's usage and cost are shared by its choices
    return PolicySample(
        text=printable(choice.text.strip()),
        thought=printable(thought) if thought else None,
        action=action,
        error=error,
        prompt_ids=completion.prompt_token_ids or [],
        completion_ids=choice.token_ids or [],
        logprobs=logprobs,
        prompt_tokens=completion.usage.prompt_tokens,
        completion_tokens=len(logprobs) if logprobs else completion.usage.completion_tokens // shared,
        cost_usd=completion.cost_usd / shared,
    )


class OpenAIPolicy:
    """A served policy (see the module docstring)."""

    def __init__(
        self,
        endpoint: ChatEndpoint,
        prompt: PromptConfig | dict | None = None,
        tokenizer: Any = None,
        greedy: bool = True,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        concurrency: int = 8,
        name: str | None = None,
    ):
        self.endpoint = endpoint
        self.prompt = PromptConfig.model_validate(prompt or {})
        self.tokenizer = tokenizer
        self.greedy = greedy
        self.temperature = temperature
        self.top_p = top_p
        self.max_new_tokens = max_new_tokens
        self.concurrency = concurrency
        self.name = name or f"openai-policy:{endpoint.config.model}"
        self._ignored_n_noted = False

    def messages(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        """The chat request's messages for a STATE row: the training prompt, images inlined."""
        messages, _ = build_messages(state, self.prompt, self.tokenizer)
        return [
            {
                "role": message["role"],
                "content": [
                    image_part(part["image"]) if part["type"] == "image" else text_part(part["text"])
                    for part in message["content"]
                ],
            }
            for message in messages
        ]

    def _replies(self, state: dict[str, Any], n: int, settings: dict[str, Any]) -> list[PolicySample]:
        messages = self.messages(state)
        try:
            first = self.endpoint.complete(messages, n=n, **settings)
        except EndpointError as err:
            failed = PolicySample("", None, None, f"endpoint error: {err}", fatal=True)
            return [failed] * n
        got = len(first.choices)
        if not 0 < got <= n:
            missing = f"the server returned {got} choices for n={n}"
            return [PolicySample("", None, None, missing, fatal=True)] * n
        replies: list[tuple[Completion, Choice] | str] = [(first, choice) for choice in first.choices]
        if got < n:  # a server that ignores n (transformers serve): the rest as requests of their own
            self._note_ignored_n(got, n)
            seed = settings.get("seed")
            for j in range(got, n):
                try:
                    extra = self.endpoint.complete(
                        messages, n=1, **settings | {"seed": None if seed is None else seed + j * SEED_STRIDE}
                    )
                    replies.append(
                        (extra, extra.choices[0]) if extra.choices else "the server returned no choice"
                    )
                except EndpointError as err:
                    replies.append(f"endpoint error: {err}")
        return [
            PolicySample("", None, None, reply, fatal=True) if isinstance(reply, str) else _sample(*reply)
            for reply in replies
        ]

    def _note_ignored_n(self, got: int, n: int) -> None:
        with _NOTE_LOCK:
            if self._ignored_n_noted:
                return
            self._ignored_n_noted = True
        logger.warning(
            "%s answered %d choice(s) for n=%d (it ignores n): the other samples are requested one at a time, "
            "each with its own seed (logged once)",
            self.endpoint.config.base_url,
            got,
            n,
        )

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
    ) -> list[list[PolicySample]]:
        """``n`` replies for each state (a STATE row as a dict), one request a state; settings default to the
        policy's own."""
        greedy = self.greedy if greedy is None else greedy
        base = {
            "temperature": 0.0 if greedy else (temperature or self.temperature),
            "top_p": None if greedy else (top_p or self.top_p),
            "max_tokens": max_new_tokens or self.max_new_tokens,
            "logprobs": logprobs,
        }

        def reply(index: int) -> list[PolicySample]:
            return self._replies(states[index], n, base | {"seed": None if seed is None else seed + index})

        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            return list(pool.map(reply, range(len(states))))

    def act(
        self, task: Task, observation: Observation, history: list[Step], reflections: list[str]
    ) -> Decision:
        return act_by_sampling(self, task, observation, history, reflections)
