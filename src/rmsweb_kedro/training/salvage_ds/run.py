"""A Salvage-DS run: the step (``step.py``) on the shared loop, the dev evaluation it selects its weights by, and
the entry point of a launched run.

**No harm by construction**: the stage scores the policy on a dev split (``sft_states_dev``: states neither SFT,
Salvage-DS's training nor ``evaluate`` uses) before training and every ``loop.eval_every`` updates, and the loop
returns the best of those checkpoints, step 0 (the SFT policy) included (``LoopConfig.select_metric``).

Several processes: ``accelerate launch ... -m rmsweb_kedro.training.salvage_ds --job JOB.json`` (the
``salvage_ds`` node starts it when ``launch`` names a config; ``training.launch``, the design SFT shares); ``JOB.json``:
``{"model_dir", "checkpoint", "train_path", "dev_path", "replay_path", "output_dir", "config": SalvageDSJob}``
(``checkpoint``: the load config of ``model_dir``, ``training.launch.job_checkpoint``; absent: path and dtype auto).
The ``served`` sampler runs there too (DDP or FSDP2): the main process serves, every process samples. Under FSDP2 and
ZeRO-3 the policy's weights are sharded: the loop turns on synced generation, so every process keeps stepping the
forwards of ``generate`` until the longest reply of any process is done.

**The run's end.** ``sampled_action_budget`` counts every round's sampled actions; a batch that finds it spent, or
no state left in the pool, ends the run at the last update (a ``StoppedBatch``: ``LoopResult.stop_reason``). A budget
is sized by ``max_rounds`` (:func:`round_cost`): :class:`SalvageDSJob` refuses one that cannot pay for even one round
a batch. ``disable_dropout`` (default on) turns every dropout of the policy off for the run (:func:`disable_dropout`).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rmsweb_kedro.contracts.prompts import PromptConfig
from rmsweb_kedro.training.distributed import rank_and_world
from rmsweb_kedro.training.loop import LoopConfig, clear_earlier_run, make_accelerator, resumes, train_loop
from rmsweb_kedro.training.salvage_ds.inputs import prepare_states
from rmsweb_kedro.training.salvage_ds.objective import SalvageDSParams
from rmsweb_kedro.training.salvage_ds.pool import GroupPool
from rmsweb_kedro.training.salvage_ds.step import SalvageDSStep
from rmsweb_kedro.training.sampling import PreparedState, SamplerConfig, make_sampler

logger = logging.getLogger(__name__)

#: The file under the loop's output_dir holding every sampled group, one JSON a line: the sampled batch and its
#: generation round, the state and its ``origin`` (why mining chose it; null when the states carry none), the policy
#: version that sampled it, the G samples (canonical texts, ``<invalid: reason>``), their rewards and how many are
#: right, the gate's decision (accepted; anchored; rejected, discarded; surplus, accepted past B and discarded) and
#: reason, and the process; the ``salvage_ds`` stage gathers every seed's into ``salvage_ds_groups``
#: (``pipelines/salvage_ds/nodes.GROUPS_SCHEMA``).
GROUP_LOG = "groups.jsonl"


# ---------------------------------------------------------------- dev evaluation


def evaluate_competence(
    model, states: list[PreparedState], p: SalvageDSParams, processor, prompt_config, n: int, chunk: int = 8
) -> tuple[dict[str, float], dict[str, bool]]:
    """``(summary, per_state)``: ``step_success_rate`` (of the greedy reply) and, with ``n`` > 0 sampled replies,
    ``competence`` (share of them that are right, averaged over states) and ``valid_rate`` (share of them that
    parse) of ``model`` on ``states``, scored by :func:`rmsweb_kedro.measures.scoring.score_states` against each
    state's reference set (the reward's), ``chunk`` states a generate call; each state's greedy step success by id."""
    from rmsweb_kedro.agents.hf_policy import HFPolicy
    from rmsweb_kedro.measures.scoring import ScoringConfig, rates, score_states

    was_training = model.training
    sampling = {"temperature": p.temperature, "top_p": p.top_p, "max_new_tokens": p.max_new_tokens}
    policy = HFPolicy(model, processor, prompt_config, batch_size=chunk * max(1, n), **sampling)  # eval mode
    scored = score_states(
        [s.row for s in states],
        policy,
        ScoringConfig(k=n, batch_size=chunk, **sampling),
        references=[s.references for s in states],
    )
    model.train(was_training)
    names = ("step_success_rate", "competence", "valid_rate") if n else ("step_success_rate",)
    summary = {name: rates(scored)[name] for name in names}
    return summary, dict(zip(scored["state_id"], scored["step_success"], strict=True))


def competence_eval_fn(
    splits: dict[str, list[dict]],
    p: SalvageDSParams,
    processor,
    prompt_config,
    n: int,
    seed: int,
    chunk: int = 8,
):
    """``eval_fn(model) -> {'eval/<split>/<metric>': value}``: :func:`evaluate_competence` on each split of STATE
    rows (``n`` sampled replies a state; 0: the greedy reply alone). Every call draws from the same seeded random
    numbers (common random numbers make before/after comparable) inside a forked RNG, so evaluating leaves the
    training's sampling stream untouched."""
    prepared = {
        split: prepare_states(rows, processor, prompt_config) for split, rows in splits.items() if rows
    }

    def eval_fn(model) -> dict[str, float]:
        metrics = {}
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            for split, states in prepared.items():
                summary, _ = evaluate_competence(model, states, p, processor, prompt_config, n, chunk)
                metrics |= {f"eval/{split}/{name}": value for name, value in summary.items()}
        return metrics

    return eval_fn


# ---------------------------------------------------------------- the run


def train_salvage_ds(
    model,
    processor,
    train_states: list[dict],
    p: SalvageDSParams,
    loop_config: LoopConfig,
    prompt_config,
    eval_fn=None,
    accelerator=None,
    sampler: SamplerConfig | None = None,
    replay_states: list[dict] | None = None,
):
    """Salvage-DS on ``train_states`` (STATE_SCHEMA rows) with the shared loop (``loop_config.batch_size`` states
    a sampled batch, ``loop_config.updates_per_batch`` updates on each); ``eval_fn(model) -> metrics`` (e.g.
    :func:`competence_eval_fn` on the dev split) runs at each evaluation, and with ``loop_config.select_metric``
    before training too, the best evaluation's weights returned; ``sampler`` says what samples the groups (default:
    ``hf``); ``replay_states``: the SFT training states the replay term (eta > 0) draws from. Returns the
    ``LoopResult``; ``output_dir/groups.jsonl`` records every sampled group, with the policy version that sampled
    it; ``LoopResult.stop_reason`` says why a run ended before ``loop_config.max_steps`` (e.g. the budget spent)."""
    if p.disable_dropout:
        disable_dropout(model)
    _log_budget(p, loop_config)
    prepared = prepare_states(train_states, processor, prompt_config)
    replay = prepare_states(replay_states, processor, prompt_config) if p.eta > 0 and replay_states else []
    reference = frozen_reference(model, p)
    group_log = Path(loop_config.output_dir) / GROUP_LOG
    clear_earlier_run(group_log, resume=resumes(loop_config))  # a fresh run: its records only
    accelerator = accelerator or make_accelerator(loop_config)
    sampler = sampler or SamplerConfig()
    pool = GroupPool(prepared, p, *rank_and_world(accelerator))
    step = _step(model, processor, pool, replay, reference, loop_config, prompt_config, sampler, accelerator)
    # checkpointed with the loop: the sampled actions spent (sampled_action_budget) and the policy version
    accelerator.register_for_checkpointing(step)
    try:
        return train_loop(
            model,
            prepared,
            collate=lambda items: {"states": items},
            loss_fn=step,
            config=loop_config,
            eval_fn=eval_fn,
            accelerator=accelerator,
            rollout=step.rollout,
            # what resume checks besides the loop's settings: the algorithm and what samples (not where it runs)
            job={"algorithm": p.model_dump(mode="json"), "sampler": sampler.kind},
        )
    finally:
        step.sampler.close()  # a managed server stops, its log kept


def disable_dropout(model) -> None:
    """Every dropout of ``model`` off (p = 0; LoRA's ``lora_dropout`` is a ``Dropout`` too; attention dropout is a
    module's float), as TRL's ``disable_dropout_in_model``: the groups are sampled in eval mode, and the frozen
    log pi_old (and pi_ref) and the updates' forwards, in training mode, are then the same policy."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0


def round_cost(p: SalvageDSParams, loop: LoopConfig) -> int:
    """The sampled actions of one generation round in every sampled batch of a run (one process's, as the budget
    and ``loop.batch_size`` are): batches (``max_steps / updates_per_batch``, rounded up) x micro-batches x
    ``batch_size`` states x G. A resampling run may take up to ``max_rounds`` times that."""
    batches = math.ceil(loop.max_steps / loop.updates_per_batch)
    return batches * loop.gradient_accumulation_steps * loop.batch_size * p.group_size


def _log_budget(p: SalvageDSParams, loop: LoopConfig) -> None:
    """A warning when ``sampled_action_budget`` pays for fewer than ``max_rounds`` rounds a batch: resampling may
    spend it, and end the run, before ``max_steps``."""
    budget, rounds = p.sampled_action_budget, p.max_rounds if p.spec.dynamic_sampling else 1
    if budget is not None and budget < round_cost(p, loop) * rounds:
        logger.warning(
            "sampled_action_budget %d pays for %.2f rounds a sampled batch, fewer than the %d a batch may take: "
            "the run ends when it is spent, possibly before max_steps %d (%d would cover them)",
            budget, budget / round_cost(p, loop), rounds, loop.max_steps, round_cost(p, loop) * rounds,
        )  # fmt: skip


def frozen_reference(model, p: SalvageDSParams):
    """pi_ref for beta > 0: a frozen copy of a full-weight policy; None with LoRA (the reference is the policy with
    its adapter disabled) or without the KL term."""
    import copy

    full_weights = not hasattr(model, "disable_adapter")
    return copy.deepcopy(model).eval().requires_grad_(False) if p.beta > 0 and full_weights else None


def _step(
    model, processor, pool: GroupPool, replay, reference, loop_config, prompt_config, sampler, accelerator
) -> SalvageDSStep:
    """The run's :class:`SalvageDSStep`: its pool (this process's shard), replay states, sampler and reference."""
    p = pool.p
    if sampler.kind == "served" and accelerator.distributed_type.name == "DEEPSPEED":
        raise ValueError(
            "sampler.kind 'served' runs with one process, DDP or FSDP2 (launch: ddp or fsdp2), not DeepSpeed: "
            "the served adapter is gathered from FSDP2's shards, which ZeRO-3 does not hold"
        )
    output_dir = Path(loop_config.output_dir)
    group_sampler = make_sampler(
        sampler, model, processor, prompt_config, p, output_dir / "served", accelerator
    )
    return SalvageDSStep(
        p,
        processor,
        prompt_config,
        reference,
        loop_config.updates_per_batch,
        pool=pool,
        group_log=output_dir / GROUP_LOG,
        sampler=group_sampler,
        replay_pool=replay,
        accelerator=accelerator,
    )


class SalvageDSJob(BaseModel):
    """What a Salvage-DS run needs besides its data: the ``config`` of a launched run's job, and the part of the
    ``salvage_ds`` node's parameters (which extend it) that one run uses."""

    model_config = ConfigDict(extra="forbid")

    algorithm: SalvageDSParams = Field(default_factory=SalvageDSParams)
    loop: LoopConfig
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    dev_samples: int = Field(
        0, ge=0, description="sampled replies per dev state at each evaluation (0: greedy)"
    )
    seed: int = 0
    sampler: SamplerConfig = Field(default_factory=SamplerConfig)

    @model_validator(mode="after")
    def _budget_pays_for_a_round(self) -> SalvageDSJob:
        """A budget that cannot pay for one round of every sampled batch ends the run before ``max_steps`` even
        without resampling: a sizing mistake (docs/salvage_ds.md, "The sampling budget and the run's end")."""
        budget, one_round = self.algorithm.sampled_action_budget, round_cost(self.algorithm, self.loop)
        if budget is not None and budget < one_round:
            rounds = self.algorithm.max_rounds
            raise ValueError(
                f"algorithm.sampled_action_budget {budget} cannot pay for one round a sampled batch: "
                f"{math.ceil(self.loop.max_steps / self.loop.updates_per_batch)} batches (loop.max_steps / "
                f"updates_per_batch) x {self.loop.gradient_accumulation_steps * self.loop.batch_size} states x G = "
                f"{self.algorithm.group_size} = {one_round} sampled actions a round; with max_rounds {rounds} a "
                f"run may take {one_round * rounds}: size it so, set null (no cap) or lower loop.max_steps"
            )
        return self


def train_job(
    model,
    processor,
    train_states: list[dict],
    config: SalvageDSJob,
    eval_fn=None,
    replay_states: list[dict] | None = None,
):
    """:func:`train_salvage_ds` with the algorithm, loop, prompt and sampler of ``config`` (a
    :class:`SalvageDSJob`, or the ``salvage_ds`` node's parameters; in this process and launched, one call)."""
    return train_salvage_ds(
        model,
        processor,
        train_states,
        config.algorithm,
        config.loop,
        config.prompt,
        eval_fn=eval_fn,
        sampler=config.sampler,
        replay_states=replay_states,
    )


def dev_eval_fn(dev_states: list[dict], config: SalvageDSJob, processor):
    """The evaluation the loop runs on the dev split (``eval/dev/<metric>``, :func:`competence_eval_fn` with
    ``dev_samples`` replies a state; greedy ones 32 states a call) and selects the returned weights by."""
    return competence_eval_fn(
        {"dev": dev_states}, config.algorithm, processor, config.prompt, config.dev_samples, config.seed, 32
    )


def main() -> None:
    """The launched entry point (``python -m rmsweb_kedro.training.salvage_ds --job JOB.json``, module docstring):
    load the job's policy and data, train, and save what the node reads back (``training.launch``)."""
    import polars as pl

    from rmsweb_kedro.training.launch import load_job_model, read_job, save_launched

    job = read_job("Salvage-DS under accelerate launch (see rmsweb_kedro.training.salvage_ds.run)")
    config = SalvageDSJob.model_validate(job["config"])
    model, processor = load_job_model(job)  # every field of its checkpoint: attn_implementation, dtype, ...
    dev, train, replay = (
        pl.read_parquet(job[key]).to_dicts() for key in ("dev_path", "train_path", "replay_path")
    )
    result = train_job(model, processor, train, config, dev_eval_fn(dev, config, processor), replay)
    save_launched(result, processor, job["output_dir"])
