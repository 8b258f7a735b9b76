"""One Accelerate training loop, shared by SFT (training/sft.py) and Salvage-DS (training/salvage_ds/).

A trainer supplies only what differs: the samples, a ``collate`` that turns a list of samples into a batch of
tensors, and a ``loss_fn(model, batch) -> (loss, metrics)``; an on-policy trainer (Salvage-DS) also supplies a
``rollout(model, batch) -> batch``. The loop does the rest, the same way every time:

- a sampled batch (``gradient_accumulation_steps`` micro-batches) is collated, rolled out once (``rollout``, under
  ``no_grad``: e.g. sample replies and record their log-probabilities under pi_old) and then trained on for
  ``updates_per_batch`` optimizer steps (mu, the GRPO paper's name; 1 for SFT), so pi_old stays frozen while
  pi_theta moves. ``max_steps`` counts optimizer steps, i.e. ``max_steps / mu`` sampled batches;

- deterministic data order: each epoch is a permutation seeded by ``seed + epoch``, sharded across processes, so a
  resumed run sees exactly the micro-batches the interrupted one would have seen;
- gradient accumulation over the step's micro-batches (``no_sync`` on all but the last), mixed precision
  (Accelerate), gradient clipping, AdamW with decay on matrices only, linear warmup then cosine decay
  (``learning_rate_at``), optional gradient checkpointing;
- evaluation loss every ``eval_every`` steps, sharded across processes (and an optional ``eval_fn`` for other
  metrics, run once: on the main process and broadcast, or on every process when the weights are sharded);
- ``save_state`` checkpoints every ``save_every`` steps and at the end; ``resume=True`` continues from the last
  complete checkpoint (model, optimizer, RNG states, step count and metrics history, and, for a checkpoint taken
  between the mu updates of a batch, that batch as rolled out, so the remaining updates use the same samples),
  but only a run of the same data and job: ``output_dir/run_identity.json`` holds the hashes of the training
  samples' content (each sample's, part by part) and of the settings that shape the steps (:func:`run_identity`);
  another run's checkpoints are an error that says which differs (the samples and parts, the settings);
- a wall-clock budget (``max_seconds``) that ends the run early, cleanly, with a checkpoint;
- a rollout that has nothing left to sample (e.g. a sampling budget spent) returns a :class:`StoppedBatch`
  instead of a batch: the run ends at the last update, with a final evaluation (only when the weights changed
  since the last one) and a final checkpoint, and says why (``LoopResult.stop_reason``);
- checkpoint selection (``select_metric``, e.g. ``eval/dev/step_success_rate``): ``eval_fn`` also runs before the
  first update (step 0), and the run returns the weights of the evaluation where the metric was highest (the
  earliest of equals: with nothing better, the starting weights), ``LoopResult.best_step`` saying which;
- a step with nothing to learn takes no optimizer step: when the rollout marks every micro-batch of the step
  ``learnable: False`` on every process (e.g. every sampled group was discarded), the step is counted and logged
  (``train/optimizer_step`` 0) but AdamW does not move the weights on stale momentum, and an evaluation due on
  weights no optimizer step changed since the last one is skipped (it would score the same weights again);
- a tqdm progress bar on the main process and a metrics history (list of dicts, also ``history.jsonl``).

Runs in a plain ``python`` process (one CPU or GPU) or under ``accelerate launch`` (DDP, FSDP2, DeepSpeed, several
machines) unchanged.

**Loss normalisation (the contract every loss_fn follows).** An optimizer step's loss is a token mean over *every*
micro-batch of the step on *every* process, so a token weighs the same whichever micro-batch or rank it falls in:

1. ``collate`` (or ``rollout``) puts ``batch["loss_tokens"] = {name: int}`` in each micro-batch: for each term of
   the loss, how many tokens of this micro-batch on this process it averages over (SFT: ``{"label": ...}``;
   Salvage-DS: one count per term, e.g. completion tokens N_o and anchored action tokens N_a). Every process
   declares the same names.
2. Before the step's micro-batches run, the loop sums each count over the step's micro-batches and all processes
   (one all-reduce) and hands the totals to every micro-batch as ``batch["step_tokens"] = {name: float}``.
3. ``loss_fn`` returns its micro-batch's *share* of the step's loss: each term's sum over this micro-batch's tokens
   divided by that term's ``step_tokens`` (a term with 0 tokens in the step is 0).
4. The loop backpropagates ``share * num_processes`` (gradient synchronisation averages over processes, so the
   update is the gradient of the step's token mean) and logs ``train/loss`` as the sum of the shares over
   micro-batches and processes (the step's token-mean loss) and ``train/<name>_tokens`` as the step totals.

A batch without ``loss_tokens`` (toy losses in tests) keeps the simple rule: ``loss_fn`` returns the micro-batch
mean and the step's micro-batches weigh equally (``loss / micro-batches``). Every other metric a ``loss_fn``
returns is averaged over the step's micro-batches and over processes (every process returns the same names), so
the history is the same on every rank. Evaluation (``evaluate``) runs as many batches on every process (weight-0
repeats where a process has fewer samples) and gives each batch its own counts as
``step_tokens`` (a batch mean) and averages the batches weighted by their samples.

Reading order, as nanoGPT's ``train.py``: :func:`train_loop` (at the end, after the helpers it uses) runs named
phases that share one small run state (``_Run``): ``_prepare`` (seed, optimizer, Accelerate) → ``_resume`` (a fresh
run's cleanup, or the last checkpoint) → ``_evaluate_start`` (step 0, with ``select_metric``) → then, step after
step, ``_train_step`` → ``_evaluate_step`` → ``_log_step`` → ``_save_step`` (or, when the rollout stopped the
run, ``_stop``), and ``_finish``.

One module because it is the one training loop SFT and Salvage-DS share, meant to be read top to bottom
(nanoGPT's style).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rmsweb_kedro.runs.tracking import log_step
from rmsweb_kedro.training.distributed import is_sharded, rank_and_world

logger = logging.getLogger(__name__)

#: ``loss_fn(model, batch) -> (scalar loss to minimise, metrics as floats)``; metrics are averaged over the
#: micro-batches of an optimizer step and logged as ``train/<name>`` (``eval/<name>`` during evaluation).
LossFn = Callable[[Any, dict[str, Any]], tuple[Any, dict[str, float]]]
Collate = Callable[[list[Any]], dict[str, Any]]


@dataclass(frozen=True)
class StoppedBatch:
    """What a ``rollout`` returns instead of a batch when the run must end before ``max_steps``: it has nothing
    left to sample (Salvage-DS: its ``sampled_action_budget`` spent, or its pool empty). The rollout agrees on it
    across processes (every process returns one at the same step); the loop drops the step's micro-batches rolled
    out so far and ends at the last update (:func:`_stop`). ``reason`` says why, e.g. ``"pool empty"``."""

    reason: str


#: ``rollout(model, batch) -> batch``: run once per micro-batch of a sampled batch, without gradients, before its
#: ``updates_per_batch`` updates; ``loss_fn`` then sees what it returns (top-level tensors are kept on the device),
#: or a :class:`StoppedBatch` that ends the run.
Rollout = Callable[[Any, dict[str, Any]], dict[str, Any] | StoppedBatch]
_COMPLETE = "COMPLETE"


class LoopConfig(BaseModel):
    """Everything the loop needs to know; a parameters dict validates into it (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")

    output_dir: str
    max_steps: int = Field(default=200, ge=0, description="optimizer steps")
    batch_size: int = Field(default=16, ge=1, description="samples per micro-batch, per process")
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    micro_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        description="None: a micro-batch is batch_size samples; a number: the step's samples re-split into "
        "micro-batches of at most this many real tokens (packed batches; the trainer gives sample_tokens)",
    )
    updates_per_batch: int = Field(
        default=1, ge=1, description="mu: optimizer steps on each sampled (rolled-out) batch"
    )
    learning_rate: float = 3e-3
    min_learning_rate_ratio: float = Field(
        default=0.1, ge=0, le=1, description="cosine floor, x learning_rate"
    )
    warmup_steps: int = Field(default=10, ge=0)
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    max_grad_norm: float | None = 1.0
    mixed_precision: str = Field(
        default="auto",
        description="Accelerate's setting: 'no' (or fp32), 'bf16', 'fp16', or 'auto' (bf16 on an accelerator, "
        "fp32 on every CPU: numerics.resolve_mixed_precision)",
    )
    gradient_checkpointing: bool = Field(
        default=False, description="recompute activations in the backward pass (memory for ~30% more compute)"
    )
    eval_every: int = Field(default=50, ge=0, description="0: evaluate only at the end")
    select_metric: str | None = Field(
        default=None,
        description="an eval_fn metric: the run returns the weights where it was highest, step 0 included "
        "(None: the last weights)",
    )
    max_eval_batches: int | None = None
    save_every: int = Field(default=0, ge=0, description="0: checkpoint only at the end")
    keep_checkpoints: int = Field(default=2, ge=1)
    save_checkpoints: bool = Field(default=True, description="False: never save_state (benchmarks)")
    seed: int = 0
    resume: bool = Field(default=True, description="False: start afresh, deleting output_dir/checkpoints")
    max_seconds: float | None = Field(default=None, description="wall-clock budget; the run stops early")
    log_every: int = Field(default=10, ge=1)
    progress: bool = True

    @field_validator("mixed_precision", mode="before")
    @classmethod
    def _precision(cls, value: Any) -> str:
        from rmsweb_kedro.models.numerics import normalise_mixed_precision

        return normalise_mixed_precision(value)


@dataclass
class LoopResult:
    """What a run gives back. ``model`` is unwrapped (plain ``nn.Module``, ready for ``save_pretrained``)."""

    model: Any
    step: int
    history: list[dict[str, float]]
    resumed_from: int | None
    stopped_early: bool
    accelerator: Any = field(repr=False, default=None)
    #: ``select_metric``: the step whose weights ``model`` holds (0: the starting weights) and its metric
    best_step: int | None = None
    best_value: float | None = None
    #: why the run ended before ``max_steps`` (a :class:`StoppedBatch`'s reason, or ``max_seconds``) and at which
    #: update, e.g. ``"pool empty at update 12"``; None: it ran to ``max_steps``
    stop_reason: str | None = None

    def last(self, key: str) -> float | None:
        """The latest logged value of ``key`` (e.g. ``'eval/loss'``), or None."""
        return next((row[key] for row in reversed(self.history) if key in row), None)


class _LoopState:
    """The loop's own resumable state (registered with Accelerate's checkpointing)."""

    def __init__(self) -> None:
        self.step = 0
        self.history: list[dict[str, float]] = []
        self.best_step: int | None = None  # select_metric: the best evaluation so far
        self.best_value: float | None = None
        # the current weights were evaluated: no optimizer step since the last evaluation
        self.evaluated = False

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "history": self.history, "best_step": self.best_step,
                "best_value": self.best_value, "evaluated": self.evaluated}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.history = list(state["history"])
        self.best_step, self.best_value = state.get("best_step"), state.get("best_value")
        self.evaluated = bool(state.get("evaluated", False))  # absent in older checkpoints: evaluate again


def _local_weights(model) -> list[tuple[str, Any]]:
    """The trainable parameters as this process holds them: a DTensor's local shard (FSDP2), the tensor itself
    otherwise, so keeping and restoring the best weights moves no shard between processes."""
    return [
        (name, param.to_local() if hasattr(param, "to_local") else param)
        for name, param in model.named_parameters()
        if param.requires_grad
    ]


class _BestWeights:
    """``select_metric``'s best weights so far: a CPU copy of this process's trainable weights, written into each
    checkpoint (``best_<rank>.pt``) so a resumed run keeps them."""

    def __init__(self) -> None:
        self.weights: dict[str, Any] | None = None

    def keep(self, model) -> None:
        import torch

        with torch.no_grad():
            self.weights = {name: t.detach().to("cpu", copy=True) for name, t in _local_weights(model)}

    def restore(self, model) -> None:
        import torch

        assert self.weights is not None
        with torch.no_grad():
            for name, tensor in _local_weights(model):
                tensor.copy_(self.weights[name].to(tensor.device))

    @staticmethod
    def path(checkpoint: Path, rank: int) -> Path:
        return checkpoint / f"best_{rank}.pt"


def learning_rate_at(step: int, config: LoopConfig) -> float:
    """Linear warmup to ``learning_rate``, then cosine decay to ``min_learning_rate_ratio * learning_rate``."""
    peak, floor = config.learning_rate, config.learning_rate * config.min_learning_rate_ratio
    if step < config.warmup_steps:
        return peak * (step + 1) / config.warmup_steps
    decay_steps = max(1, config.max_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / decay_steps)
    return floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (peak - floor)


def make_accelerator(config: LoopConfig):
    """An Accelerator for ``config`` (launch-time settings such as DDP/FSDP come from ``accelerate launch``)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    # One process may run several trainings in a row (SFT then Salvage-DS in `kedro run`), each with its own
    # precision; the process-wide state (not the distributed one) is per training.
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    from accelerate.utils import DistributedDataParallelKwargs

    from rmsweb_kedro.models.modeling import cpu_only
    from rmsweb_kedro.models.numerics import resolve_mixed_precision

    # DDP: a text-only batch leaves Qwen3-VL's vision tower without gradients, which DDP refuses unless told
    unused = DistributedDataParallelKwargs(find_unused_parameters=True)
    cpu = cpu_only()
    accelerator = Accelerator(
        mixed_precision=resolve_mixed_precision(config.mixed_precision), cpu=cpu, kwargs_handlers=[unused]
    )
    if cpu and accelerator.num_processes > 1 and os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        _fsdp_on_cpu(accelerator)
    return accelerator


def _fsdp_on_cpu(accelerator) -> None:
    """FSDP across CPU processes (gloo): Accelerate 1.15 applies an FSDP launch config only to accelerator device
    types and leaves CPU processes as plain data parallel (``MULTI_CPU``: ``AcceleratorState`` skips the FSDP
    plugin), though torch's ``fully_shard`` runs on the CPU. So the tests of the sharded path can run here, the
    plugin the launcher described (its ``FSDP_*`` variables) is set as Accelerate would on a GPU."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin()
    if accelerator.mixed_precision != "no":
        plugin.set_mixed_precision(accelerator.mixed_precision)
    accelerator.state.fsdp_plugin = plugin
    accelerator.state.distributed_type = DistributedType.FSDP
    # as AcceleratorState does: each later AcceleratorState() (set_seed, ...) copies the partial state's type back
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP


def _optimizer(model, config: LoopConfig):
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]  # matrices and embeddings; not norms and biases
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.learning_rate, betas=config.betas)


def _micro_batches(count: int, config: LoopConfig, rank: int, world: int, start: int) -> Iterator[list[int]]:
    """The sample indices (of ``count`` samples) of this process's micro-batches of ``batch_size`` samples,
    forever, from micro-batch number ``start`` on (epochs reshuffled)."""
    import torch

    per_epoch = max(1, count // (config.batch_size * world))
    epoch, skip = divmod(start, per_epoch)
    while True:
        generator = torch.Generator().manual_seed(config.seed + epoch)
        order = torch.randperm(count, generator=generator).tolist()
        if len(order) < config.batch_size * world:  # fewer samples than one global batch: repeat them
            order = (order * math.ceil(config.batch_size * world / len(order)))[: config.batch_size * world]
        for batch_index in range(skip, per_epoch):
            first = (batch_index * world + rank) * config.batch_size
            yield order[first : first + config.batch_size]
        epoch, skip = epoch + 1, 0


def split_by_tokens(lengths: Sequence[int], budget: int, count: int | None = None) -> list[list[int]]:
    """Positions of ``lengths`` grouped into micro-batches of at most ``budget`` tokens each, first-fit decreasing
    (longest first, each into the first micro-batch it fits; ties by position, so the split is deterministic); a
    length over the budget gets a micro-batch of its own, never dropped or cut. ``count`` (from the first-fit count
    up to ``len(lengths)``): exactly that many non-empty micro-batches, the one holding most samples halved (its
    samples dealt alternately by length) until there are enough; halves of a micro-batch stay within its budget.
    Each micro-batch lists its positions in their original order."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    loads: list[int] = []
    for i in order:
        slot = next((g for g, load in enumerate(loads) if load + lengths[i] <= budget), None)
        if slot is None:
            groups.append([i])
            loads.append(lengths[i])
        else:
            groups[slot].append(i)
            loads[slot] += lengths[i]
    if count is not None:
        if not len(groups) <= count <= len(lengths):
            raise ValueError(
                f"cannot split {len(lengths)} samples into {count} micro-batches of at most {budget} tokens "
                f"(first-fit decreasing needs {len(groups)})"
            )
        while len(groups) < count:
            largest = max(range(len(groups)), key=lambda g: (len(groups[g]), -g))
            group = groups.pop(largest)  # in decreasing length: dealt alternately, the halves balance
            groups[largest:largest] = [group[0::2], group[1::2]]
    return [sorted(group) for group in groups]


def _step_split(
    chunks: list[list[int]], length: Callable[[int], int], budget: int, accelerator
) -> list[list[int]]:
    """A step's micro-batches of sample indices (``chunks``, ``batch_size`` each) re-split by ``budget`` tokens, as
    many on this process as on the one needing most (one all-gather)."""
    import torch

    indices = [i for chunk in chunks for i in chunk]
    lengths = [length(i) for i in indices]
    needed = torch.tensor([len(split_by_tokens(lengths, budget))], device=accelerator.device)
    count = int(accelerator.gather(needed).max())
    return [[indices[p] for p in group] for group in split_by_tokens(lengths, budget, count)]


def _count_tokens(batch: dict[str, Any]) -> int:
    mask = batch.get("attention_mask")
    if mask is not None:
        return int(mask.sum())
    ids = batch.get("input_ids")
    return int(ids.numel()) if ids is not None else 0


#: Settings a resumed run may change: how long it runs and how it reports, not what a step does.
RESUMABLE_CHANGES = frozenset(
    {"output_dir", "max_steps", "max_seconds", "resume", "progress", "log_every", "eval_every", "max_eval_batches",
     "save_every", "keep_checkpoints", "save_checkpoints"}
)  # fmt: skip


def _stable(value: Any) -> Any:
    """A JSON-able stand-in for what a sample may hold: tensors and arrays by their values, dataclasses by their
    fields and pydantic models by their dump (a sample's content, never its type alone), sets sorted, other objects by
    type (never by ``repr``, which can carry a memory address)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _parts(value)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return type(value).__name__


def _parts(sample: Any) -> dict[str, Any]:
    """A sample's named parts: a dataclass's fields (e.g. Salvage-DS's ``PreparedState``: the state's row, prompt ids,
    references, reference reply), a mapping's items; anything else is one part, ``value``."""
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return {f.name: getattr(sample, f.name) for f in dataclasses.fields(sample)}
    if isinstance(sample, Mapping):
        return dict(sample)
    return {"value": sample}


def _digest(value: Any, length: int = 8) -> str:
    import hashlib

    encoded = json.dumps(value, sort_keys=True, default=_stable).encode()
    return hashlib.sha256(encoded).hexdigest()[:length]


def run_identity(config: LoopConfig, train_samples: Sequence[Any], job: dict[str, Any] | None = None) -> dict:
    """What must match for ``resume`` to continue a run: ``data``, the hash of the training samples' content, and
    ``samples``, each sample's ``[name, {part: hash}]`` (its ``state_id`` or position; :func:`_parts`), so a refusal
    names the samples and parts that changed; ``job``, the hash of the step-shaping ``settings``. ``job``: the
    trainer's own settings (loss, algorithm), if any."""
    import hashlib

    data, samples = hashlib.sha256(), []
    for index, sample in enumerate(train_samples):
        data.update(json.dumps(sample, sort_keys=True, default=_stable).encode())
        parts = _parts(sample)
        name = parts.get("state_id") if isinstance(parts.get("state_id"), str) else str(index)
        samples.append([name, {part: _digest(value) for part, value in parts.items()}])
    settings = {k: v for k, v in config.model_dump(mode="json").items() if k not in RESUMABLE_CHANGES}
    settings |= {"job": job or {}}
    return {
        "data": data.hexdigest()[:16],
        "samples": samples,
        "job": _digest(settings, 16),
        "settings": settings,
    }


def _changed_samples(before: list, now: list) -> str:
    """Which of the samples ``now`` differ from ``before`` (:func:`run_identity`'s ``samples``), by position: each
    by name with its changed parts, the first five."""
    changed = [
        f"{name!r} in {sorted(k for k in set(parts) | set(old) if parts.get(k) != old.get(k))}"
        for (name, parts), (_, old) in zip(now, before, strict=False)
        if parts != old
    ]
    counts = f"{len(before)} samples there, {len(now)} now" if len(before) != len(now) else ""
    listed = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return "; ".join(x for x in (counts, f"changed: {listed}" if changed else "") if x)


def check_resumable(output_dir: Path, identity: dict[str, Any]) -> None:
    """Raise when ``output_dir`` holds checkpoints of another run (other data or job), naming what differs."""
    path = output_dir / "run_identity.json"
    fix = f"set loop.resume: false to start afresh (deletes {output_dir}/checkpoints) or give loop.output_dir a new folder"
    if not path.exists():
        raise ValueError(
            f"{output_dir}/checkpoints has no run_identity.json (an older or foreign run): {fix}"
        )
    saved = json.loads(path.read_text())
    problems = []
    if saved.get("data") != identity["data"]:
        which = _changed_samples(saved["samples"], identity["samples"]) if "samples" in saved else ""
        problems.append(
            f"the training data differ (hash {saved.get('data')} there, {identity['data']} now"
            + (f"; {which})" if which else ")")
        )
    if saved.get("job") != identity["job"]:
        before, now = saved.get("settings", {}), identity["settings"]
        keys = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
        problems.append(f"the job differs in {keys}")
    if problems:
        raise ValueError(
            f"loop.resume: {output_dir} holds checkpoints of another run: {'; '.join(problems)}; {fix}"
        )


def complete_checkpoints(output_dir: Path) -> list[Path]:
    """The complete checkpoints under ``output_dir/checkpoints``, oldest first."""
    root = output_dir / "checkpoints"
    found = [p for p in root.glob("step_*") if (p / _COMPLETE).exists()] if root.exists() else []
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def resumes(config: LoopConfig) -> bool:
    """Whether a run of ``config`` continues an earlier one: ``resume`` is on and ``output_dir`` holds a complete
    checkpoint (otherwise it starts afresh, whatever ``resume`` says)."""
    return config.resume and bool(complete_checkpoints(Path(config.output_dir)))


def clear_earlier_run(*paths: Path, resume: bool) -> None:
    """A fresh run's cleanup: unless ``resume``, delete what an earlier run left at ``paths`` (folders or files),
    so its records do not mix with this run's. Each site passes what keeps its outputs: ``loop.resume`` for the
    loop's checkpoints and the ``salvage_ds`` node's seed folder, :func:`resumes` for a trainer's own log that only
    a run continued from a checkpoint may append to (Salvage-DS's groups)."""
    if resume:
        return
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _rollout_file(path: Path, rank: int) -> Path:
    return path / f"rollout_{rank}.pt"


def _save_checkpoint(
    accelerator,
    output_dir: Path,
    state: _LoopState,
    keep: int,
    pending: list[dict[str, Any]] | None,
    best: _BestWeights,
) -> None:
    """``save_state`` plus, between the updates of a batch, each process's rolled-out micro-batches (``pending``),
    and the best weights so far (``select_metric``)."""
    import torch

    path = output_dir / "checkpoints" / f"step_{state.step:07d}"
    accelerator.save_state(str(path))
    if pending is not None:
        torch.save([_to_device(b, "cpu") for b in pending], _rollout_file(path, accelerator.process_index))
    if best.weights is not None:
        torch.save(best.weights, _BestWeights.path(path, accelerator.process_index))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (path / _COMPLETE).write_text(str(state.step))
        for old in complete_checkpoints(output_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        with open(output_dir / "history.jsonl", "w") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in state.history)
    accelerator.wait_for_everyone()


def evaluate(
    model,
    samples: Sequence[Any],
    collate: Collate,
    loss_fn: LossFn,
    config: LoopConfig,
    accelerator,
    rollout: Rollout | None = None,
):
    """Mean loss (and metrics) over ``samples``, split across processes; returns ``{'eval/loss': ..., ...}``."""
    import torch

    model.eval()
    rank, world = rank_and_world(accelerator)
    indices = list(range(rank, len(samples), world))
    batches = [indices[i : i + config.batch_size] for i in range(0, len(indices), config.batch_size)]
    # Every process runs as many batches as the one with most (sharded weights gather in every forward, so a
    # process that stopped early would leave the others waiting): the missing ones repeat sample 0, weighted 0,
    # which also gives a process without samples the metric keys every process reduces.
    count = math.ceil(math.ceil(len(samples) / world) / config.batch_size) or 1
    if config.max_eval_batches is not None:
        count = min(count, config.max_eval_batches)
    weighted = [(chunk, len(chunk)) for chunk in batches[:count]]
    weighted += [([0], 0)] * (count - len(weighted))
    totals: dict[str, float] = {}
    with torch.no_grad():
        for chunk, weight in weighted:
            batch = _to_device(collate([samples[i] for i in chunk]), accelerator.device)
            if rollout is not None:
                batch = rollout(model, batch)
            if "loss_tokens" in batch:  # normalise by the batch's own counts: a batch mean
                batch["step_tokens"] = {k: float(v) for k, v in batch["loss_tokens"].items()}
            loss, metrics = loss_fn(model, batch)
            for key, value in {"loss": float(loss), **metrics}.items():
                totals[key] = totals.get(key, 0.0) + float(value) * weight
            totals["_n"] = totals.get("_n", 0.0) + weight
    model.train()
    keys = sorted(totals)
    summed = accelerator.reduce(
        torch.tensor([totals.get(k, 0.0) for k in keys], device=accelerator.device), "sum"
    )
    values = dict(zip(keys, summed.tolist(), strict=True))
    count = max(values.pop("_n", 0.0), 1.0)
    return {f"eval/{k}": v / count for k, v in values.items()}


def _to_device(batch: dict[str, Any], device) -> dict[str, Any]:
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}


def _step_tokens(pending: list[dict[str, Any]], accelerator) -> dict[str, float] | None:
    """Each ``loss_tokens`` count summed over the step's micro-batches and all processes (module docstring)."""
    import torch

    names = sorted(pending[0].get("loss_tokens", {}))
    if not names:
        return None
    local = [float(sum(batch["loss_tokens"][name] for batch in pending)) for name in names]
    total = accelerator.reduce(torch.tensor(local, dtype=torch.float64, device=accelerator.device), "sum")
    return dict(zip(names, total.tolist(), strict=True))


def _mean_over_processes(values: dict[str, float], summed: set[str], accelerator) -> dict[str, float]:
    """``values`` of this process, summed over processes for the keys in ``summed`` and averaged for the others."""
    import torch

    if accelerator.num_processes == 1:
        return values
    keys = sorted(values)
    local = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=accelerator.device)
    total = accelerator.reduce(local, "sum").tolist()
    world = accelerator.num_processes
    return {k: v if k in summed else v / world for k, v in zip(keys, total, strict=True)}


def _run_eval_fn(eval_fn: Callable[[Any], dict[str, float]], model, accelerator) -> dict[str, float]:
    """``eval_fn`` once: on the main process, its metrics broadcast to the others; with sharded weights on every
    process together (each forward gathers the shards; generation is synced, see ``train_loop``)."""
    from accelerate.utils import broadcast_object_list

    unwrapped = accelerator.unwrap_model(model)
    if is_sharded(accelerator) or accelerator.num_processes == 1:
        return eval_fn(unwrapped)
    metrics = [eval_fn(unwrapped) if accelerator.is_main_process else None]
    broadcast_object_list(metrics, from_process=0)
    return metrics[0]


# ================================================================ the loop: prepare, resume, then step after step


@dataclass
class _Run:
    """What the phases of one :func:`train_loop` call share: its arguments, the prepared model and optimizer, the
    resumable state, the best weights so far and the sampled batch being trained on."""

    config: LoopConfig
    accelerator: Any
    model: Any  # prepared: wrapped by Accelerate (DDP, FSDP2, DeepSpeed) where it runs so
    optimizer: Any
    train_samples: Sequence[Any]
    collate: Collate
    loss_fn: LossFn
    rollout: Rollout | None
    eval_samples: Sequence[Any] | None
    eval_fn: Callable[[Any], dict[str, float]] | None
    sample_tokens: Callable[[Any], int] | None
    state: _LoopState = field(default_factory=_LoopState)
    best: _BestWeights = field(default_factory=_BestWeights)
    #: the micro-batches of the sampled batch being trained on, as rolled out; None between batches
    pending: list[dict[str, Any]] | None = None
    resumed_from: int | None = None
    batches: Iterator[list[int]] | None = (
        None  # this process's micro-batches of sample indices, from the next
    )
    lengths: dict[int, int] = field(default_factory=dict)  # each training sample's tokens, measured once
    started: float = 0.0  # time.monotonic() at the first step (max_seconds)
    window_tokens: int = 0  # real tokens since the last logged throughput
    window_started: float = 0.0
    stopped_early: bool = False
    stop_reason: str | None = None  # LoopResult.stop_reason
    saved_step: int | None = None  # the step of the last checkpoint this run saved or resumed from
    bar: Any = None  # tqdm

    @property
    def output_dir(self) -> Path:
        return Path(self.config.output_dir)


def train_loop(
    model,
    train_samples: Sequence[Any],
    collate: Collate,
    loss_fn: LossFn,
    config: LoopConfig,
    eval_samples: Sequence[Any] | None = None,
    eval_fn: Callable[[Any], dict[str, float]] | None = None,
    accelerator=None,
    rollout: Rollout | None = None,
    job: dict[str, Any] | None = None,
    sample_tokens: Callable[[Any], int] | None = None,
) -> LoopResult:
    """Train ``model`` for ``config.max_steps`` optimizer steps (or until ``max_seconds``); see the module doc.

    ``train_samples``/``eval_samples``: any indexable sequence (a list of dicts is typical). ``eval_fn(model)``
    returns extra metrics at each evaluation, logged as they are named (e.g. ``{'eval/val/step_success_rate': 0.4}``).
    Pass ``accelerator`` to share one (e.g. to build the model under it); by default one is made from ``config``.
    ``rollout``: see the module doc (it receives the prepared model, e.g. DDP-wrapped). ``job``: the trainer's own
    settings, part of the run's identity (:func:`run_identity`) that ``resume`` checks. ``sample_tokens(sample)``:
    the real tokens a training sample's micro-batch row holds (needed by ``micro_batch_tokens``; called once a
    sample).
    """
    run = _prepare(model, train_samples, collate, loss_fn, config, eval_samples, eval_fn, accelerator, rollout,
                   sample_tokens)  # fmt: skip
    _resume(run, job)
    if config.select_metric is not None and run.state.step == 0 and run.resumed_from is None:
        _evaluate_start(run)
    _start(run)
    while run.state.step < config.max_steps:
        row = _train_step(run)
        if isinstance(row, StoppedBatch):  # nothing left to sample: the run ends at the last update
            _stop(run, row.reason)
            break
        out_of_time = config.max_seconds is not None and time.monotonic() - run.started > config.max_seconds
        last = run.state.step == config.max_steps or out_of_time
        _evaluate_step(run, row, last)
        _log_step(run, row)
        _save_step(run, last)
        if out_of_time and run.state.step < config.max_steps:
            _stop(run, f"time budget (max_seconds {config.max_seconds:.0f}) spent")
            break
    return _finish(run)


def _prepare(
    model, train_samples, collate, loss_fn, config: LoopConfig, eval_samples, eval_fn, accelerator, rollout,
    sample_tokens,
) -> _Run:  # fmt: skip
    """Check the arguments, seed, and prepare the model and its optimizer on the accelerator."""
    from accelerate.utils import set_seed

    if not len(train_samples):
        raise ValueError("train_loop: no training samples")
    if config.micro_batch_tokens is not None and sample_tokens is None:
        raise ValueError(
            f"loop.micro_batch_tokens {config.micro_batch_tokens}: this trainer gives no sample_tokens to measure "
            "samples by (SFT does; Salvage-DS does not): set loop.micro_batch_tokens: null"
        )
    accelerator = accelerator or make_accelerator(config)
    set_seed(config.seed)
    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    model.train()
    if config.gradient_checkpointing:
        # non-reentrant checkpointing: works with frozen inputs (LoRA) and FSDP2 without enable_input_require_grads
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    optimizer = _optimizer(model, config)
    model, optimizer = accelerator.prepare(model, optimizer)
    _ready_for_generation(model, config, accelerator)
    run = _Run(config, accelerator, model, optimizer, train_samples, collate, loss_fn, rollout, eval_samples,
               eval_fn, sample_tokens)  # fmt: skip
    accelerator.register_for_checkpointing(run.state)
    if config.select_metric is not None and eval_fn is None:
        raise ValueError(f"loop.select_metric {config.select_metric!r} needs an eval_fn that measures it")
    return run


def _ready_for_generation(model, config: LoopConfig, accelerator) -> None:
    """Sharded weights (FSDP, DeepSpeed): synced generation on, and FSDP2's root unit set by one forward."""
    import torch

    if is_sharded(accelerator):
        budget, accum = config.micro_batch_tokens, config.gradient_accumulation_steps
        if accelerator.distributed_type.name == "DEEPSPEED" and (accum > 1 or budget is not None):
            raise ValueError(
                "under DeepSpeed keep loop.gradient_accumulation_steps: 1 and loop.micro_batch_tokens: null (the "
                "engine would step every micro-batch and rescale the loss itself); raise loop.batch_size instead"
            )
        # transformers turns on synced generation (synced_gpus) for modules carrying this flag (torch's
        # fully_shard sets it; set for every sharded case, ZeRO-3 included): a process that finishes its replies
        # early keeps joining the others' forwards (each gathers the shards), instead of leaving them waiting
        # forever (tests/production/test_distributed.py: the run hangs with synced_gpus=False).
        accelerator.unwrap_model(model)._is_fsdp_managed_module = True
    if accelerator.is_fsdp2:
        # FSDP2 takes the first module to run forward as its root; generate encodes the screenshots through the
        # vision tower (its own unit, conf/base/accelerate/fsdp2.yaml) before any forward of the whole model, which
        # would make the tower a root of its own and fail the next forward. One token through the model first.
        with torch.no_grad():
            model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=accelerator.device))


def _resume(run: _Run, job: dict[str, Any] | None) -> None:
    """A fresh run deletes an earlier run's checkpoints; a resumed one (same data and job) loads its last."""
    config, accelerator, output_dir = run.config, run.accelerator, run.output_dir
    if accelerator.is_main_process:  # a fresh run must not mix with an old run's steps
        clear_earlier_run(output_dir / "checkpoints", resume=config.resume)
    accelerator.wait_for_everyone()
    checkpoints = complete_checkpoints(output_dir) if config.resume else []
    identity = run_identity(config, run.train_samples, job)
    if checkpoints:
        check_resumable(output_dir, identity)
    elif accelerator.is_main_process:
        (output_dir / "run_identity.json").write_text(json.dumps(identity, sort_keys=True))
    if checkpoints:
        _load_checkpoint(run, checkpoints[-1])
        run.saved_step = run.state.step


def _load_checkpoint(run: _Run, checkpoint: Path) -> None:
    """The state saved in ``checkpoint``, the batch it was inside of (mu > 1) and the best weights so far."""
    import torch

    accelerator, state, mu = run.accelerator, run.state, run.config.updates_per_batch
    accelerator.load_state(str(checkpoint))
    accelerator.wait_for_everyone()
    run.resumed_from = state.step
    logger.info("resumed from %s at step %d", checkpoint, state.step)
    if state.step % mu:  # taken between the updates of a batch: continue on the same samples
        saved = _rollout_file(checkpoint, accelerator.process_index)
        if not saved.exists():
            raise ValueError(
                f"{checkpoint} was taken at step {state.step}, inside a batch of updates_per_batch={mu} "
                f"updates, but holds no rolled-out batch for process {accelerator.process_index}: resume with "
                "the number of processes it was run with (a changed updates_per_batch is refused earlier, by "
                "the run's identity)"
            )
        run.pending = [
            _to_device(b, accelerator.device) for b in torch.load(saved, weights_only=False)
        ]  # our own file, written by _save_checkpoint
    if state.best_step is not None:
        run.best.weights = torch.load(_BestWeights.path(checkpoint, accelerator.process_index))


def _evaluate_start(run: _Run) -> None:
    """``select_metric``: score the starting weights (step 0), the first candidate to return."""
    start = {"step": 0, **_run_eval_fn(run.eval_fn, run.model, run.accelerator)}
    run.state.history.append(start)
    run.state.evaluated = True
    _select(run, start)


def _select(run: _Run, row: dict[str, float]) -> None:
    """Keep the weights of an evaluation that beats the best so far on ``select_metric``."""
    config, state = run.config, run.state
    value = row.get(config.select_metric)
    if value is None:
        measured = sorted(k for k in row if k.startswith("eval/"))
        raise ValueError(f"loop.select_metric {config.select_metric!r} is not among eval_fn's {measured}")
    if state.best_value is None or value > state.best_value:
        state.best_step, state.best_value = state.step, float(value)
        run.best.keep(run.accelerator.unwrap_model(run.model))


def _start(run: _Run) -> None:
    """This process's micro-batches from the first batch not yet started, the clocks and the progress bar."""
    from tqdm.auto import tqdm

    config, accelerator = run.config, run.accelerator
    run.batches = _micro_batches(
        len(run.train_samples),
        config,
        *rank_and_world(accelerator),
        # the batches already started, the pending one included
        start=math.ceil(run.state.step / config.updates_per_batch) * config.gradient_accumulation_steps,
    )
    run.started = time.monotonic()
    run.bar = tqdm(
        total=config.max_steps,
        initial=run.state.step,
        desc="train",
        disable=not (config.progress and accelerator.is_local_main_process),
    )
    run.window_tokens, run.window_started = 0, time.monotonic()


def _train_step(run: _Run) -> dict[str, float] | StoppedBatch:
    """One optimizer step on the pending sampled batch (a new one rolled out when none is pending): the shares of
    its micro-batches backpropagated, the gradients clipped, AdamW stepped unless no micro-batch of any process
    had anything to learn. Returns the step's row of the history, or the rollout's :class:`StoppedBatch` (no step
    taken)."""
    config, accelerator, state = run.config, run.accelerator, run.state
    if run.pending is None:
        batch = _next_batch(run)
        if isinstance(batch, StoppedBatch):
            return batch
        run.pending = batch
    lr = learning_rate_at(state.step, config)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    sums = _backward(run)
    grad_norm = (
        accelerator.clip_grad_norm_(run.model.parameters(), config.max_grad_norm)
        if config.max_grad_norm
        else None
    )
    learnable = _learnable(run)
    if learnable:
        run.optimizer.step()
        state.evaluated = False
    run.optimizer.zero_grad(set_to_none=True)
    state.step += 1
    if (
        state.step % config.updates_per_batch == 0
    ):  # the batch's mu updates are done: the next step samples anew
        run.pending = None
    row: dict[str, float] = {"step": state.step, "lr": lr, **{f"train/{k}": v for k, v in sums.items()}}
    row["train/optimizer_step"] = float(learnable)
    if grad_norm is not None:
        row["train/grad_norm"] = float(grad_norm)
    if state.step % config.log_every == 0 or state.step == config.max_steps:
        elapsed = max(time.monotonic() - run.window_started, 1e-9)
        row["train/tokens_per_s"] = run.window_tokens * accelerator.num_processes / elapsed
        run.window_tokens, run.window_started = 0, time.monotonic()
    return row


def _next_batch(run: _Run) -> list[dict[str, Any]] | StoppedBatch:
    """The next sampled batch's micro-batches, collated and rolled out; or the first :class:`StoppedBatch` a
    rollout returns (the micro-batches rolled out before it are dropped: the run ends)."""
    budget = run.config.micro_batch_tokens
    chunks = [next(run.batches) for _ in range(run.config.gradient_accumulation_steps)]
    if budget is not None:
        chunks = _step_split(chunks, partial(_sample_length, run), budget, run.accelerator)
    rolled = []
    for chunk in chunks:
        batch = _rolled_out(run, [run.train_samples[i] for i in chunk])
        if isinstance(batch, StoppedBatch):
            return batch
        rolled.append(batch)
    return rolled


def _sample_length(run: _Run, index: int) -> int:
    """A training sample's tokens, measured once (an over-long one is logged once, and trained alone)."""
    budget = run.config.micro_batch_tokens
    if index not in run.lengths:
        run.lengths[index] = int(run.sample_tokens(run.train_samples[index]))
        if run.lengths[index] > budget:
            logger.warning(
                "training sample %d has %d tokens, over loop.micro_batch_tokens %d: it is trained in a "
                "micro-batch of its own (raise the budget if that runs out of memory)",
                index, run.lengths[index], budget,
            )  # fmt: skip
    return run.lengths[index]


def _rolled_out(run: _Run, samples: list[Any]) -> dict[str, Any] | StoppedBatch:
    """``samples`` collated on the device and, for an on-policy trainer, rolled out (without gradients)."""
    import torch

    batch = _to_device(run.collate(samples), run.accelerator.device)
    if run.rollout is None:
        return batch
    with torch.no_grad():
        return run.rollout(run.model, batch)


def _backward(run: _Run) -> dict[str, float]:
    """Every micro-batch of the pending batch through ``loss_fn`` and backward, gradients synchronised once; the
    step's metrics (module docstring: the loss a token mean over the step, other metrics micro-batch means, both
    over processes) and token counts."""
    accelerator, pending = run.accelerator, run.pending
    micros = len(pending)  # the same on every process
    step_tokens = _step_tokens(pending, accelerator)
    # shares of the step's token mean (module docstring), or equal-weight micro-batch means
    scale = accelerator.num_processes if step_tokens is not None else 1.0 / micros
    sums: dict[str, float] = {}
    step_real = 0
    for micro, batch in enumerate(pending):
        step_real += _count_tokens(batch)
        if step_tokens is not None:
            batch["step_tokens"] = step_tokens
        syncing = micro == micros - 1  # all-reduce gradients only once per optimizer step
        with nullcontext() if syncing else accelerator.no_sync(run.model):
            loss, metrics = run.loss_fn(run.model, batch)
            accelerator.backward(loss * scale)
        sums["loss"] = sums.get("loss", 0.0) + float(loss.detach()) * (1.0 if step_tokens else 1.0 / micros)
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + float(value) / micros
    run.window_tokens += step_real
    budget = run.config.micro_batch_tokens
    if budget is not None:  # to tune the budget: how many micro-batches, how full (mean over processes)
        sums |= {"micro_batches": float(micros), "micro_batch_fill": step_real / (micros * budget)}
    sums = _mean_over_processes(sums, {"loss"} if step_tokens is not None else set(), accelerator)
    return sums | {f"{name}_tokens": count for name, count in (step_tokens or {}).items()}


def _learnable(run: _Run) -> bool:
    """Whether any micro-batch of the step, on any process, has something to learn (``learnable``; default
    True): one decision on every process."""
    import torch

    accelerator = run.accelerator
    learnable = torch.tensor(
        float(any(b.get("learnable", True) for b in run.pending)), device=accelerator.device
    )
    return bool(accelerator.reduce(learnable, "sum") > 0)


def _evaluate_step(run: _Run, row: dict[str, float], last: bool) -> None:
    """Every ``eval_every`` steps and at the last: the evaluation loss and ``eval_fn``'s metrics into ``row``, and
    the weights kept when they are the best on ``select_metric``; skipped when no optimizer step changed the
    weights since the last evaluation (the same weights would score the same)."""
    config = run.config
    due = (config.eval_every and run.state.step % config.eval_every == 0) or last
    if not due or run.state.evaluated:
        return
    run.state.evaluated = True
    if run.eval_samples:
        row.update(
            evaluate(
                run.model, run.eval_samples, run.collate, run.loss_fn, config, run.accelerator, run.rollout
            )
        )
    if run.eval_fn is not None:
        row.update(_run_eval_fn(run.eval_fn, run.model, run.accelerator))
        if config.select_metric is not None:
            _select(run, row)


def _log_step(run: _Run, row: dict[str, float]) -> None:
    """The step's row into the history, the tracking run and the progress bar."""
    run.state.history.append(row)
    if run.accelerator.is_main_process:
        # live, into the kedro run's MLflow run when tracking is on (rmsweb_kedro.runs.tracking)
        log_step(row)
    run.bar.update(1)
    run.bar.set_postfix(
        {k.split("/")[-1]: f"{v:.4g}" for k, v in row.items() if k in ("train/loss", "eval/loss")}
    )


def _save_step(run: _Run, last: bool) -> None:
    """A checkpoint every ``save_every`` steps and at the last (``save_checkpoints``)."""
    config, step = run.config, run.state.step
    if config.save_checkpoints and ((config.save_every and step % config.save_every == 0) or last):
        _save_checkpoint(
            run.accelerator, run.output_dir, run.state, config.keep_checkpoints, run.pending, run.best
        )
        run.saved_step = step


def _stop(run: _Run, reason: str) -> None:
    """End the run at the last update for ``reason``: a final evaluation of weights that changed since the last
    one (into the last update's row), and a final checkpoint unless this step's is saved and nothing was added
    since."""
    state = run.state
    run.stopped_early = True
    run.stop_reason = f"{reason} at update {state.step}"
    logger.warning("stopping early: %s", run.stop_reason)
    row: dict[str, float] = {"step": state.step}
    if state.step > 0:  # step 0's weights are the starting ones
        _evaluate_step(run, row, last=True)
    evaluated = len(row) > 1
    if evaluated:
        if state.history and state.history[-1].get("step") == state.step:
            state.history[-1].update(row)
        else:
            state.history.append(row)
        if run.accelerator.is_main_process:
            log_step(row)
    if evaluated or run.saved_step != state.step:
        _save_step(run, last=True)


def _finish(run: _Run) -> LoopResult:
    """The trained model, unwrapped; with ``select_metric``, the best evaluation's weights restored into it."""
    config, accelerator, state = run.config, run.accelerator, run.state
    run.bar.close()
    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(run.model, keep_fp32_wrapper=False)  # plain forward, no autocast
    if state.best_step is not None and state.best_step != state.step:
        run.best.restore(unwrapped)
        logger.info(
            "%s was highest at step %d (%.4g): returning those weights, not step %d's",
            config.select_metric, state.best_step, state.best_value, state.step,
        )  # fmt: skip
    unwrapped.eval()
    return LoopResult(
        unwrapped, state.step, state.history, run.resumed_from, run.stopped_early, accelerator,
        state.best_step, state.best_value, run.stop_reason,
    )  # fmt: skip
