"""HFPolicy: a local Hugging Face Qwen3-VL policy with batched generation, greedy or sampled.

Two faces over one generation routine:

- ``act(task, observation, history, reflections) -> Decision``: the :class:`agents.base.Agent` protocol, so a
  trained checkpoint drives BrowserEnv episodes like any other agent;
- ``sample(states, n, ...) -> list[list[PolicySample]]``: ``n`` replies for each STATE row, with completion token
  ids and their log-probabilities, for failure mining (K samples a state) and Salvage-DS (G samples a group).

Prompts come from :mod:`rmsweb_kedro.prompts`, the module SFT trains with; replies are parsed with
:func:`actions.parse_reply`, and a reply that does not parse is returned with its error, never raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmsweb_kedro.actions import Action, ActionParseError, parse_reply
from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.prompts import PromptConfig, build_messages, image_paths, render_prompt, state_from_live
from rmsweb_kedro.schema import Observation, Step, Task, Usage


@dataclass
class PolicySample:
    """One generated reply. ``logprobs[i]`` is log pi(completion_ids[i] | prompt, earlier tokens) under the model
    itself (temperature 1, no top-p), whatever the sampling settings were."""

    text: str
    thought: str | None
    action: Action | None
    error: str | None
    prompt_ids: list[int] = field(repr=False)
    completion_ids: list[int] = field(repr=False)
    logprobs: list[float] = field(repr=False)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)


class HFPolicy:
    """A local Qwen3-VL policy (see the module docstring)."""

    def __init__(
        self,
        model,
        processor,
        prompt: PromptConfig | dict | None = None,
        greedy: bool = True,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        batch_size: int = 16,
        name: str = "hf-policy",
    ):
        self.model = model.eval()
        self.processor = processor
        self.processor.tokenizer.padding_side = "left"  # generation continues every prompt at its right end
        self.prompt = PromptConfig.model_validate(prompt or {})
        self.greedy = greedy
        self.temperature = temperature
        self.top_p = top_p
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.name = name

    @classmethod
    def from_pretrained(
        cls, path: str | Path, dtype: str = "float32", attn_implementation: str | None = "sdpa", **kw
    ):
        """Load a checkpoint directory (the tiny one, an SFT output, or a real Qwen3-VL-Instruct)."""
        from rmsweb_kedro.modeling import load_model

        model, processor = load_model(
            {"path": str(path), "dtype": dtype, "attn_implementation": attn_implementation}
        )
        return cls(model, processor, name=kw.pop("name", f"hf-policy:{path}"), **kw)

    # ------------------------------------------------------------------ the Agent protocol

    def act(
        self, task: Task, observation: Observation, history: list[Step], reflections: list[str]
    ) -> Decision:
        state = state_from_live(task, observation, history, reflections)
        sample = self.sample([state], n=1)[0][0]
        usage = Usage(prompt_tokens=sample.prompt_tokens, completion_tokens=len(sample.completion_ids))
        return Decision(sample.action, sample.thought, sample.text, sample.error, usage)

    # ------------------------------------------------------------------ batched sampling

    def sample(
        self,
        states: list[dict[str, Any]],
        n: int = 1,
        greedy: bool | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_new_tokens: int | None = None,
        seed: int | None = None,
    ) -> list[list[PolicySample]]:
        """``n`` replies for each state (a STATE row as a dict); settings default to the policy's own."""
        import torch

        greedy = self.greedy if greedy is None else greedy
        settings = {
            "do_sample": not greedy,
            "max_new_tokens": max_new_tokens or self.max_new_tokens,
            # top_k=0: exactly temperature + top-p, whatever the checkpoint's generation_config says (Qwen's: 20)
            **(
                {}
                if greedy
                else {
                    "temperature": temperature or self.temperature,
                    "top_p": top_p or self.top_p,
                    "top_k": 0,
                }
            ),
        }
        if seed is not None:
            torch.manual_seed(seed)
        states_per_chunk = max(1, self.batch_size // n)
        results: list[list[PolicySample]] = []
        for start in range(0, len(states), states_per_chunk):
            chunk = states[start : start + states_per_chunk]
            flat = self._generate([s for s in chunk for _ in range(n)], settings)
            results += [flat[i * n : (i + 1) * n] for i in range(len(chunk))]
        return results

    def _generate(self, states: list[dict[str, Any]], settings: dict[str, Any]) -> list[PolicySample]:
        import torch
        from PIL import Image

        tokenizer = self.processor.tokenizer
        conversations = [build_messages(s, self.prompt, tokenizer)[0] for s in states]
        texts = [render_prompt(messages, self.processor) for messages in conversations]
        images = [
            Image.open(path).convert("RGB") for messages in conversations for path in image_paths(messages)
        ]
        inputs = self.processor(text=texts, images=images or None, padding=True, return_tensors="pt")
        inputs = inputs.to(self.model.device)
        with torch.no_grad():
            out = self.model.generate(
                **inputs,
                **settings,
                return_dict_in_generate=True,
                output_logits=True,
                pad_token_id=tokenizer.pad_token_id,
            )
        prompt_length = inputs["input_ids"].shape[1]
        completions = out.sequences[:, prompt_length:]
        logprobs = torch.stack(out.logits, dim=1).float().log_softmax(-1)
        chosen = logprobs.gather(-1, completions.unsqueeze(-1)).squeeze(-1)
        stop_ids = set(self._stop_ids())
        samples = []
        for row in range(len(states)):
            ids = completions[row].tolist()
            end = next((i + 1 for i, t in enumerate(ids) if t in stop_ids), len(ids))  # keep the stop token
            prompt_ids = inputs["input_ids"][row][inputs["attention_mask"][row].bool()].tolist()
            text = tokenizer.decode(ids[:end], skip_special_tokens=True).strip()
            samples.append(self._parsed(text, prompt_ids, ids[:end], chosen[row, :end].tolist()))
        return samples

    def _stop_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        ids = eos if isinstance(eos, list) else [eos] if eos is not None else []
        return [*ids, self.processor.tokenizer.pad_token_id]

    @staticmethod
    def _parsed(text: str, prompt_ids: list[int], ids: list[int], logprobs: list[float]) -> PolicySample:
        try:
            thought, action = parse_reply(text)
            error = None
        except ActionParseError as err:
            thought, action, error = None, None, err.reason
        return PolicySample(text, thought, action, error, prompt_ids, ids, logprobs)
