"""Where a Salvage-DS group comes from: the states prepared for sampling (:class:`PreparedState`) and the samplers
that draw G replies for each (:class:`GroupSampler`): ``hf``, the policy in this process, or ``served``, vLLM
serving the policy's base checkpoint with each optimizer step's LoRA adapter loaded into it (docs/training.md,
"Which sampler"). The rollout, the gate, the anchor and dynamic sampling (``training/salvage_ds/``) are the same
code whichever samples.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.agents.base import PolicySample
from rmsweb_kedro.contracts.actions import Action
from rmsweb_kedro.models.serving import ServerConfig, ServerError, VLLMServer
from rmsweb_kedro.training.distributed import is_sharded

logger = logging.getLogger(__name__)


class SamplingSettings(Protocol):
    """The sampling fields of the algorithm's parameters (``salvage_ds.objective.SalvageDSParams``)."""

    temperature: float
    top_p: float
    max_new_tokens: int


@dataclass(frozen=True)
class PreparedState:
    """A state tokenised once: its row (the prompt is built from it), its reference set, the mining probe's samples
    of it (how many, how many right), its prompt ids and the reference reply with the anchor mask."""

    state_id: str
    row: dict
    references: list[Action]
    prompt_ids: list[int]
    reply_ids: list[int]  # reference reply + end of turn
    reply_action_mask: list[int]  # 1 on the action's tokens (and the end of turn), 0 on the thought
    probe_samples: int = 0
    probe_right: int = 0


class SamplerConfig(BaseModel):
    """``sampler``: what samples the groups. ``hf``: the policy in this process (transformers ``generate``);
    ``served``: vLLM serving the policy's base checkpoint, with the LoRA adapter saved and loaded into it after
    every optimizer step (docs/training.md, "Which sampler")."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["hf", "served"] = "hf"
    server: ServerConfig = Field(
        default_factory=ServerConfig
    )  # served: a URL you run, or one the stage starts


class GroupSampler(Protocol):
    """What samples a rollout's groups (one interface, as verl's rollout base): the rollout, the gate, the anchor
    and dynamic sampling are the same code whichever samples. ``version`` is the policy version the last groups
    were sampled by: 1 for the starting weights, + 1 each time the trainable weights changed (an optimizer step)."""

    version: int
    reload_seconds: float  # spent so far bringing the sampler up to the policy's weights (adapter reloads)

    def sample(
        self, policy, states: list[PreparedState], n: int, greedy: bool = False
    ) -> list[list[PolicySample]]: ...

    def close(self) -> None: ...


def weights_stamp(policy) -> int:
    """Changes whenever a trainable weight is written in place (an optimizer step, a loaded checkpoint): the sum of
    torch's per-tensor version counters, free to read, unlike a hash of the weights."""
    return sum(param._version for param in policy.parameters() if param.requires_grad)


class _Versioned:
    """The policy version a sampler samples with (:class:`GroupSampler`)."""

    version = 0
    reload_seconds = 0.0
    _stamp: int | None = None

    def _advance(self, policy) -> bool:
        """Count a new version when the weights changed since the last call; True then."""
        stamp = weights_stamp(policy)
        if stamp == self._stamp:
            return False
        self._stamp, self.version = stamp, self.version + 1
        return True


class HFSampler(_Versioned):
    """Groups from the policy in this process: :func:`agents.hf_policy.sample_replies` (``sampler: hf``)."""

    def __init__(self, processor, prompt_config, p: SamplingSettings):
        self.processor, self.prompt_config, self.p = processor, prompt_config, p

    def sample(self, policy, states: list[PreparedState], n: int, greedy: bool = False):
        from rmsweb_kedro.agents.hf_policy import sample_replies

        self._advance(policy)
        return sample_replies(
            policy,
            self.processor,
            [s.row for s in states],
            self.prompt_config,
            n,
            greedy=greedy,
            temperature=self.p.temperature,
            top_p=self.p.top_p,
            max_new_tokens=self.p.max_new_tokens,
            logprobs=False,  # pi_old comes from the training forward (exactly the ratio's denominator)
        )

    def close(self) -> None:
        pass


class ServedSampler(_Versioned):
    """Groups from vLLM serving the policy (``sampler: served``; :mod:`rmsweb_kedro.models.serving`).

    The server serves the base checkpoint; before sampling, when the trainable weights changed, the adapter is
    saved to ``work_dir/adapters/v<version>`` and loaded under a new name (``policy-<run>-v<version>``), and the
    previous one unloaded. Requests name the adapter of the current version, so a group is never sampled by a stale
    one (a failed load is an error, not a fallback). The replies' token ids (vLLM's ``return_token_ids``) are what
    the trainer trains on; the server's prompt ids must equal the trainer's. A server that dies or stops answering
    is a :class:`serving.ServerError` naming its log, after the request's retries (``server.max_retries``).

    Several processes (``accelerator`` with ``num_processes > 1``, DDP or FSDP2): the main process starts (or
    attaches to) the server, saves and loads each version's adapter and unloads the old one; every process gathers
    the adapter's shards when the weights are sharded (a collective), then waits until the main process has loaded
    it, and samples its own states from the adapter name the main process broadcast, so no rank samples with a
    stale one. The version is the main process's, the same on every rank."""

    def __init__(
        self,
        config: ServerConfig,
        work_dir: str | Path,
        processor,
        prompt_config,
        p: SamplingSettings,
        accelerator=None,
    ):
        self.config, self.work_dir = config, Path(work_dir)
        self.processor, self.prompt_config, self.p = processor, prompt_config, p
        self.accelerator = accelerator if accelerator is not None and accelerator.num_processes > 1 else None
        self.main = self.accelerator is None or self.accelerator.is_main_process
        self.server: VLLMServer | None = None
        self.adapter: str | None = None  # the loaded adapter's name
        self.run = uuid.uuid4().hex[:8]  # adapter names of this run: a shared server may hold another run's
        tokenizer = processor.tokenizer
        self.stop_ids = {tokenizer.convert_tokens_to_ids(tokenizer.eos_token), tokenizer.pad_token_id}

    def _from_main(self, *values):
        """``values`` as the main process has them, on every process (one process: unchanged)."""
        if self.accelerator is None:
            return values
        from accelerate.utils import broadcast_object_list

        return tuple(broadcast_object_list(list(values), from_process=0))

    def _start(self, policy) -> None:
        """The main process starts (managed) or attaches to the server; the others attach once it is healthy, with
        its URL and key. A managed server serves the base weights in place, from the checkpoint directory the
        policy was loaded from (``serving.base_directory``; at 8B a copy was ~16 GB written at every start and
        resume); only a policy with none (built or trained in memory) has its base saved first, to
        ``work_dir/base``."""
        from rmsweb_kedro.models.modeling import save_checkpoint
        from rmsweb_kedro.models.serving import base_directory

        if self.config.base_url:
            self.server = VLLMServer(self.config).attach() if self.main else None
        else:
            # the same answer on every process (sharded: no check, which would read the weights whole)
            base = base_directory(policy, check=not is_sharded(self.accelerator))
            if base is None:
                # the base weights the adapter applies to; sharded: gathered by every process (a collective)
                weights = self.accelerator.get_state_dict(policy) if is_sharded(self.accelerator) else None
                if self.main:
                    base = self.work_dir / "base"
                    save_checkpoint(policy, self.processor, base, state_dict=weights)
            if self.main:
                self.server = VLLMServer(self.config, base, self.work_dir / "vllm_server.log").start()
        main = (self.server.base_url, self.server.api_key) if self.main else (None, None)
        base_url, api_key, self.run = self._from_main(*main, self.run)
        if not self.main:  # the main process's server (managed or the user's), for requests and error reports
            update = {"base_url": base_url, "python": None, "api_key": api_key, "api_key_env": None}
            self.server = VLLMServer(self.config.model_copy(update=update))

    def _adapter_weights(self, policy) -> dict[str, torch.Tensor] | None:
        """The trainable (LoRA) weights, full: gathered from their shards under FSDP2 (every process takes part,
        only these weights travel); None when this process holds them whole (``save_pretrained`` reads them)."""
        if not is_sharded(self.accelerator):
            return None
        return {
            name: (param.full_tensor() if hasattr(param, "full_tensor") else param).detach().cpu()
            for name, param in policy.named_parameters()
            if param.requires_grad
        }

    def sync(self, policy) -> None:
        """Bring the server to the policy's current adapter (nothing to do when the weights did not change)."""

        if self.server is None:
            self._start(policy)
        changed = self._advance(policy) or self.adapter is None
        changed, self.version = self._from_main(changed, self.version)  # one decision, the main's version
        if not changed:
            return
        started = time.perf_counter()
        name = f"policy-{self.run}-v{self.version}"
        weights = self._adapter_weights(policy)
        if self.main:
            path = self.work_dir / "adapters" / f"v{self.version}"
            policy.save_pretrained(path, state_dict=weights)  # peft: the adapter alone
            self.server.load_adapter(name, path)
            if self.adapter is not None:
                self.server.unload_adapter(self.adapter)
                for old in (self.work_dir / "adapters").glob("v*"):
                    if old != path:
                        shutil.rmtree(old, ignore_errors=True)
        if self.accelerator is not None:  # nobody samples before the main process has loaded the new adapter
            self.accelerator.wait_for_everyone()
        self.adapter = name
        self.reload_seconds += time.perf_counter() - started

    def sample(self, policy, states: list[PreparedState], n: int, greedy: bool = False):
        from rmsweb_kedro.agents.openai_policy import OpenAIPolicy
        from rmsweb_kedro.models.endpoint import ChatEndpoint, EndpointConfig

        self.sync(policy)
        c = self.config
        endpoint = EndpointConfig(
            base_url=self.server.base_url,
            model=self.adapter,
            api_key=self.server.api_key,
            timeout_s=c.request_timeout_s,
            max_retries=c.max_retries,
            backoff_s=0.5,
            extra_body={"return_token_ids": True},
        )
        client = OpenAIPolicy(
            ChatEndpoint(endpoint),
            self.prompt_config,
            tokenizer=self.processor.tokenizer,  # the page tree cut exactly as in the trainer's prompt
            max_new_tokens=self.p.max_new_tokens,
            concurrency=c.concurrency,
        )
        seed = int(
            torch.randint(0, 2**31 - 1, ())
        )  # from the loop's checkpointed RNG: a resumed run draws alike
        groups = client.sample(
            [s.row for s in states], n, greedy, self.p.temperature, self.p.top_p, seed=seed, logprobs=True
        )
        for state, group in zip(states, groups, strict=True):
            for sample in group:
                self._check(state, sample)
                sample.prompt_ids = state.prompt_ids
        return groups

    def _check(self, state: PreparedState, sample: PolicySample) -> None:
        """A reply the trainer can train on: it came, with its token ids, for the trainer's prompt."""
        where = f"state {state.state_id!r}, adapter {self.adapter} at {self.server.base_url}"
        if sample.fatal:
            down = "" if self.server.alive() else f"; {self.server.describe_failure()}"
            if down and not self.main and not self.config.base_url:
                down += f" (the main process's server: its log is {self.work_dir / 'vllm_server.log'})"
            raise ServerError(f"sampling failed ({where}): {sample.error}{down}")
        if not sample.completion_ids:
            raise ServerError(
                f"the server returned no token ids ({where}): the served sampler needs vLLM (return_token_ids)"
            )
        if sample.prompt_ids != state.prompt_ids:
            raise ServerError(
                f"the server's prompt differs from the trainer's ({where}: {len(sample.prompt_ids)} vs "
                f"{len(state.prompt_ids)} tokens): serve the policy's own checkpoint (its chat template and "
                "processor)"
            )

    def close(self) -> None:
        """Stop a managed server; on a user's server, unload this run's adapter (the main process's task)."""
        if self.server is None or not self.main:
            return
        if self.server.process is None and self.adapter is not None and self.server.alive():
            self.server.unload_adapter(self.adapter)
        self.server.stop()


def make_sampler(
    config: SamplerConfig, policy, processor, prompt_config, p: SamplingSettings, work_dir, accelerator=None
):
    """The :class:`GroupSampler` ``config`` names; ``served`` needs a LoRA policy (see docs/training.md) and, with
    several processes, the run's ``accelerator``."""
    if config.kind == "hf":
        return HFSampler(processor, prompt_config, p)
    from peft import PeftModel

    if not isinstance(policy, PeftModel):
        raise ValueError(
            "sampler.kind 'served' needs a LoRA policy (the SFT model trained with sft.lora): the server gets "
            "each step's adapter at run time. Full-weight updates would go through vLLM's weight-transfer API "
            "(NCCL or IPC between GPUs), which this project does not drive; use sampler.kind 'hf' for full weights"
        )
    return ServedSampler(config.server, work_dir, processor, prompt_config, p, accelerator)
