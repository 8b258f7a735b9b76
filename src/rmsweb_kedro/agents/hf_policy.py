"""HFPolicy: a local Hugging Face Qwen3-VL policy with batched generation, greedy or sampled (the ``hf`` kind of
:class:`agents.base.Policy`; ``openai`` is :class:`agents.openai_policy.OpenAIPolicy`).

One sampling routine, :func:`sample_replies`, serves every stage that generates from a local checkpoint: this
policy's two faces, failure mining, Salvage-DS training (its groups) and its competence evaluation:

- ``act(task, observation, history, reflections) -> Decision``: the :class:`agents.base.Agent` protocol, so a
  trained checkpoint drives BrowserEnv episodes like any other agent;
- ``sample(states, n, ...) -> list[list[PolicySample]]``: ``n`` replies for each STATE row, with completion token
  ids and their log-probabilities, for failure mining (K samples a state) and offline evaluation.

Prompts come from :mod:`rmsweb_kedro.contracts.prompts`, the module SFT trains with (screenshots included); sampling is
exactly temperature + top-p (``top_k=0``, whatever the checkpoint's generation_config says); replies are parsed
with :func:`actions.parse_reply`, and a reply that does not parse is returned with its error, never raised.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rmsweb_kedro.agents.base import Decision, PolicySample, act_by_sampling, parse_sample
from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages, image_paths, render_prompt
from rmsweb_kedro.contracts.schema import Observation, Step, Task


def prompt_inputs(states: list[dict[str, Any]], prompt: PromptConfig, processor):
    """The processor's batch (left-padded ``input_ids``, ``attention_mask``, and the screenshots' pixel values
    when the prompt shows them) for the prompts of ``states``: what generation and training both start from."""
    from PIL import Image

    conversations = [build_messages(s, prompt, processor.tokenizer)[0] for s in states]
    texts = [render_prompt(messages, processor) for messages in conversations]
    images = [Image.open(path).convert("RGB") for messages in conversations for path in image_paths(messages)]
    # left padding: generation continues every prompt at its right end
    return processor(
        text=texts, images=images or None, padding=True, padding_side="left", return_tensors="pt"
    )


def stop_ids(model, tokenizer) -> set[int]:
    """The tokens that end a reply: the model's end-of-turn token(s) and padding."""
    eos = model.generation_config.eos_token_id
    ids = eos if isinstance(eos, list) else [eos] if eos is not None else []
    return {*ids, tokenizer.pad_token_id}


@contextmanager
def root_gathered(model) -> Iterator[None]:
    """FSDP2's root unit gathered while ``model`` generates: ``generate`` on a PEFT model runs the wrapped model's
    forward, not the root module's, so the root's pre-forward hook (which gathers its parameters: embeddings, final
    norm, head) never fires; the layers' own units still gather in their forwards. Anything else (one process, no
    sharding): nothing to do."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        yield
        return
    model.unshard()
    try:
        yield
    finally:
        model.reshard()


def sample_replies(
    model,
    processor,
    states: list[dict[str, Any]],
    prompt: PromptConfig,
    n: int = 1,
    *,
    greedy: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    logprobs: bool = True,
) -> list[list[PolicySample]]:
    """``n`` replies for each state (STATE rows as dicts) in one ``generate`` call, without gradients.

    Sampled replies draw from exactly temperature + top-p (``top_k=0`` overrides a checkpoint's own default, e.g.
    Qwen's 20 or transformers' 50). A reply ends at (and keeps) its first stop token (:func:`stop_ids`).
    ``logprobs=False`` skips the per-token log-probabilities (they cost a (sequences, tokens, vocabulary) tensor)."""
    import torch

    tokenizer = processor.tokenizer
    inputs = prompt_inputs(states, prompt, processor).to(model.device)
    sampling = (
        {"do_sample": False}
        if greedy
        else {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
    )
    # In eval mode, as Salvage-DS samples between its updates: in training mode LoRA's dropout perturbs the policy,
    # and some transformers versions (5.17) drop the KV cache of gradient-checkpointed layers.
    training = model.training
    model.eval()
    try:
        with torch.no_grad(), root_gathered(model):
            out = model.generate(
                **inputs,
                **sampling,
                max_new_tokens=max_new_tokens,
                num_return_sequences=n,
                return_dict_in_generate=True,
                output_logits=logprobs,
                pad_token_id=tokenizer.pad_token_id,
            )
    finally:
        model.train(training)
    prompt_length = inputs["input_ids"].shape[1]
    completions = out.sequences[:, prompt_length:]
    chosen = None
    if logprobs:
        per_token = torch.stack(out.logits, dim=1).float().log_softmax(-1)
        chosen = per_token.gather(-1, completions.unsqueeze(-1)).squeeze(-1)
    stops = stop_ids(model, tokenizer)
    groups: list[list[PolicySample]] = []
    for index in range(len(states)):
        prompt_ids = inputs["input_ids"][index][inputs["attention_mask"][index].bool()].tolist()
        group = []
        for row in range(index * n, (index + 1) * n):  # generate returns each prompt's n sequences together
            ids = completions[row].tolist()
            end = next((i + 1 for i, t in enumerate(ids) if t in stops), len(ids))  # keep the stop token
            text = tokenizer.decode(ids[:end], skip_special_tokens=True).strip()
            thought, action, error = parse_sample(text)
            token_logprobs = chosen[row, :end].tolist() if chosen is not None else []
            group.append(PolicySample(text, thought, action, error, prompt_ids, ids[:end], token_logprobs))
        groups.append(group)
    return groups


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
        self.prompt = PromptConfig.model_validate(prompt or {})
        self.greedy = greedy
        self.temperature = temperature
        self.top_p = top_p
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.name = name

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        dtype: str = "auto",
        attn_implementation: str | None = "sdpa",
        device: str = "auto",
        **kw,
    ):
        """Load a checkpoint directory (the tiny one, an SFT output, or a real Qwen3-VL-Instruct) onto
        ``device`` in ``dtype`` (``modeling.resolve_device``/``resolve_dtype``: ``auto`` is the accelerator when
        there is one, in bf16; float32 on the CPU)."""
        from rmsweb_kedro.models.modeling import load_model

        model, processor = load_model(
            {"path": str(path), "dtype": dtype, "attn_implementation": attn_implementation, "device": device}
        )
        return cls(model, processor, name=kw.pop("name", f"hf-policy:{path}"), **kw)

    # ------------------------------------------------------------------ the Agent protocol

    def act(
        self, task: Task, observation: Observation, history: list[Step], reflections: list[str]
    ) -> Decision:
        return act_by_sampling(self, task, observation, history, reflections)

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
        logprobs: bool = True,
    ) -> list[list[PolicySample]]:
        """``n`` replies for each state (a STATE row as a dict), ``batch_size`` sequences a ``generate`` call;
        settings default to the policy's own; ``seed`` seeds torch's generator first."""
        import torch

        settings = {
            "greedy": self.greedy if greedy is None else greedy,
            "temperature": temperature or self.temperature,
            "top_p": top_p or self.top_p,
            "max_new_tokens": max_new_tokens or self.max_new_tokens,
        }
        if seed is not None:
            torch.manual_seed(seed)
        states_per_chunk = max(1, self.batch_size // n)
        results: list[list[PolicySample]] = []
        for start in range(0, len(states), states_per_chunk):
            chunk = states[start : start + states_per_chunk]
            results += sample_replies(
                self.model, self.processor, chunk, self.prompt, n, logprobs=logprobs, **settings
            )
        return results
