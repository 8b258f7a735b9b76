"""Salvage-DS on the shared loop: only what differs from SFT. A "sample" of the loop is a prepared state
(``inputs.prepare_states``); :meth:`SalvageDSStep.rollout` samples G replies per state with the current policy (a
``GroupSampler``: ``hf`` in this process, or ``served`` by vLLM), scores and gates each group, fills the batch by
dynamic sampling from the :class:`~rmsweb_kedro.training.salvage_ds.pool.GroupPool` and freezes pi_old; the step
(its ``loss_fn``) then takes mu = ``updates_per_batch`` gradient steps on L (``objective.py``) with those samples.

A rollout reads in four moves: **sample** rounds of groups, **decide** each group once as it comes (accepted, up to
B; anchored beside them, never counting toward B; rejected, or accepted past B: ``surplus``, both discarded:
``train/discarded_groups``, ``train/rounds``), **assemble** the rows to train in one forward for every term, and
**freeze** what the mu updates share (log pi_old, log pi_ref). A step that ends with nothing to learn (no accepted
group with a non-zero advantage, nothing anchored, no replay) takes no optimizer step (``learnable``). A batch that
finds nothing to sample (``sampled_action_budget`` spent, or the pool empty: ``GroupPool.exhausted``) is a
``StoppedBatch``: the loop ends the run there.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, NotRequired, TypedDict

import torch

from rmsweb_kedro.agents.base import PolicySample
from rmsweb_kedro.contracts.actions import format_action
from rmsweb_kedro.training.distributed import is_sharded, on_every_process, rank_and_world
from rmsweb_kedro.training.loop import StoppedBatch
from rmsweb_kedro.training.salvage_ds.inputs import continuation_logits, vision_inputs
from rmsweb_kedro.training.salvage_ds.objective import (
    REJECT_REASONS,
    RejectReason,
    Rows,
    SalvageDSParams,
    SampledRows,
    StepCounts,
    gate,
    group_advantages,
    group_statistics,
    salvage_ds_loss,
    score_group,
    token_entropy,
    token_logprobs,
)
from rmsweb_kedro.training.salvage_ds.pool import GroupPool, draw
from rmsweb_kedro.training.sampling import GroupSampler, HFSampler, PreparedState

Decision = Literal["accepted", "anchored", "rejected", "surplus"]


class RolledOutBatch(TypedDict):
    """What :meth:`SalvageDSStep.rollout` hands the loss (the loop keeps it, and checkpoints it, for the batch's mu
    updates). R rows, in this order: n_acc accepted samples, n_anc anchored references, n_rep replayed references
    (or, with nothing to train, one placeholder reference row that trains nothing); T the longest continuation."""

    prompts: list[list[int]]  # R prompts' token ids, unpadded (the forward left-pads them)
    replies: list[list[int]]  # R continuations: sampled completions, then reference replies + end of turn
    pixel_values: NotRequired[torch.Tensor]  # (patches, C * 2 * 16 * 16): the rows' screenshots, in row order
    image_grid_thw: NotRequired[torch.Tensor]  # (images, 3); both absent when the prompts show no screenshot
    n_accepted: int  # n_acc
    n_anchored: int  # n_anc
    learnable: bool  # an accepted A_hat != 0, anything anchored or replayed, or beta > 0 with accepted rows
    advantages: torch.Tensor  # (n_acc,) float32: A_hat of each accepted sample
    anchor_mask: torch.Tensor  # (n_anc, T) long: 1 on a reference's action tokens and end of turn
    replay_mask: torch.Tensor  # (n_rep, T) long: 1 on every token of a replayed reference reply
    loss_tokens: dict[str, int]  # this micro-batch's StepCounts, by name (the loop's loss contract)
    old_logp: torch.Tensor | None  # (n_acc, T) log pi_old at the sampling temperature; None when mu = 1
    ref_logp: torch.Tensor | None  # (n_acc + n_anc + n_rep, T) log pi_ref; None when beta = 0
    rollout_metrics: dict[str, float]  # what the batch's groups were; logged with each of its mu updates
    step_tokens: NotRequired[dict[str, float]]  # the loop's: loss_tokens summed over the step and processes


@dataclass(frozen=True)
class Group:
    """One sampled group and the gate's one decision on it."""

    state: PreparedState
    samples: list[PolicySample]  # G
    rewards: list[float]  # r_{g,i}
    right: list[bool]  # matches_any: each sample's action does what the reference set does
    reason: RejectReason | None  # None: accepted by the gate
    decision: Decision
    advantages: list[float]  # A_hat of each sample; accepted groups only
    round: int  # the batch's generation round that sampled it
    policy_version: int  # the weights that sampled it


@dataclass
class SampledBatch:
    """A batch's groups, decided round by round, until it holds ``wanted`` (B) accepted groups."""

    wanted: int
    groups: list[Group] = field(default_factory=list)
    rounds: int = 0

    def decided(self, decision: Decision) -> list[Group]:
        return [g for g in self.groups if g.decision == decision]

    @property
    def n_accepted(self) -> int:
        return len(self.decided("accepted"))


class SalvageDSStep:
    """The shared loop's ``rollout`` and ``loss_fn`` for Salvage-DS (and its ablation modes).

    ``rollout``: sample G replies per state with the current policy, score and gate each group, and, with dynamic
    sampling, sample further rounds of states from ``pool`` until the batch holds B accepted groups or ``max_rounds``
    rounds are spent (the rejected groups the ``anchor`` rule names anchored beside them); draw the batch's SFT
    replay states from ``replay_pool`` (eta > 0); then freeze what the mu updates share: the rows to train (accepted
    samples, anchored references, replayed references), the advantages and, when mu > 1, log pi_old (with mu = 1,
    pi_old is pi_theta at the only update: ``logp.detach()``, one forward less). ``__call__`` (the loss_fn): L
    (``objective.py``) on those rows with the current pi_theta.

    The run's bookkeeping is checkpointed with the loop (``state_dict``), so a resumed run keeps to
    ``sampled_action_budget`` and to the pool as it was: the sampled actions spent, each state's run of all-right
    draws and the states saturated (left the pool). Each process keeps its own (states are drawn per process).

    Training rows carry their screenshots' image inputs; the frozen reference pi_ref (beta > 0) is
    ``reference_model`` when given, else the policy itself with its LoRA adapter disabled (peft's
    ``disable_adapter()``: no second copy of the weights). ``accelerator``: the run's (rank, sharded weights); None:
    one plain process."""

    def __init__(
        self,
        p: SalvageDSParams,
        processor,
        prompt_config,
        reference_model=None,
        updates_per_batch: int = 1,
        pool: GroupPool | None = None,
        group_log: str | Path | None = None,
        sampler: GroupSampler | None = None,
        replay_pool: list[PreparedState] | None = None,
        accelerator=None,
    ):
        self.p = p
        #: every sampled group's record (JSON lines: the viewer's Salvage-DS tab, docs/viewer.md), appended
        self.group_log = Path(group_log) if group_log is not None else None
        self.batches = 0  # sampled batches so far (batch k feeds updates k*mu .. k*mu + mu - 1)
        self.processor = processor
        self.prompt_config = prompt_config
        self.pad_id = processor.tokenizer.pad_token_id
        self.image_token_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
        self.reference_model = reference_model
        self.updates_per_batch = updates_per_batch
        self.pool = pool if pool is not None else GroupPool([], p)
        self.replay_pool = replay_pool or []
        if p.eta > 0 and not self.replay_pool:
            raise ValueError("eta > 0 (SFT replay) needs replay states: pass the SFT training states")
        self.sampler = sampler or HFSampler(processor, prompt_config, p)
        self.accelerator = accelerator

    def state_dict(self) -> dict:
        """The pool's bookkeeping, the batches sampled and the policy version, under the keys (and in the order)
        every checkpoint of this step has held."""
        pool = self.pool.state_dict()
        return {"sampled_actions": pool.pop("sampled_actions"), "batches": self.batches,
                "policy_version": self.sampler.version, **pool}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.pool.load_state_dict(state)
        self.batches = int(state.get("batches", 0))  # absent in checkpoints written before the group log
        # the version of the checkpoint's last groups: the resumed weights sample as the next one, so the
        # versions in groups.jsonl go on rising (absent in checkpoints written before the served sampler)
        self.sampler.version = int(state.get("policy_version", 0))

    # ---------------------------------------------------------------- the rollout

    def rollout(self, model, batch: dict) -> RolledOutBatch | StoppedBatch:
        """sample (and decide) → assemble → freeze, for the loop's ``batch["states"]`` (B prepared states); a
        ``StoppedBatch`` when any process has nothing left to sample."""
        policy = getattr(model, "module", model)  # a DDP wrapper has no generate: use the bare module
        sharded = is_sharded(self.accelerator)
        wanted = len(batch["states"])  # B accepted groups
        first = self.pool.first_round(batch["states"], wanted)
        stopped = self._stopped(first)
        if stopped is not None:
            return stopped
        reload_before, started = self.sampler.reload_seconds, time.perf_counter()
        sampled = self._sample(policy, first, wanted, sharded)
        reload_seconds = self.sampler.reload_seconds - reload_before
        sampling_seconds = time.perf_counter() - started - reload_seconds
        replayed = draw(self.replay_pool, self.p.replay_states) if self.p.eta > 0 else []
        self._log_groups(sampled.groups)
        self.batches += 1
        rolled = self._assemble(policy, sampled, replayed, batch["states"])
        rolled |= self._freeze(policy, rolled, sharded)
        rolled["rollout_metrics"] = self._rollout_metrics(sampled, replayed, sampling_seconds, reload_seconds)
        return rolled

    def _stopped(self, first_round: list[PreparedState]) -> StoppedBatch | None:
        """A ``StoppedBatch`` when this process or another has nothing left to sample (``GroupPool.exhausted``),
        decided together before anyone generates (with sharded weights generate is a collective), with the same
        reason on every process."""
        reason = self.pool.exhausted(first_round)
        rank, world = rank_and_world(self.accelerator)
        if world > 1:
            from accelerate.utils import gather_object

            reasons = gather_object([f"process {rank}: {reason}" if reason else None])
            reason = next((r for r in reasons if r), None)
        return StoppedBatch(reason) if reason else None

    def _sample(self, policy, states: list[PreparedState], wanted: int, sharded: bool) -> SampledBatch:
        """Rounds of G samples for each state, from the batch's first round (``states``), each group decided as it
        comes, until the batch holds ``wanted`` (B) accepted groups, or (without dynamic sampling) after one round,
        after ``max_rounds``, or when the budget (counting every round) or this process's shard runs out."""
        p, pool = self.p, self.pool
        sampled = SampledBatch(wanted=wanted)
        while states:
            sampled.rounds += 1
            groups = self.sampler.sample(policy, states, p.group_size)
            pool.spend(sum(len(g) for g in groups))
            for state, samples in zip(states, groups, strict=True):
                sampled.groups.append(self._decide(state, samples, sampled))
            done = (
                sampled.n_accepted >= wanted
                or not p.spec.dynamic_sampling
                or sampled.rounds >= p.max_rounds
                or not pool.budget_left()
            )
            states = [] if done else pool.next_round(wanted)
            if sharded:  # every process generates until the last one is done: generate is a collective then
                done = on_every_process(done or not states, policy)
                states = [] if done else pool.keep_generating(states, wanted)
        return sampled

    def _decide(self, state: PreparedState, samples: list[PolicySample], sampled: SampledBatch) -> Group:
        """The one decision on a group (its rewards, right flags, competence and the gate's reason), and the
        state's streak of all-right draws counted."""
        p = self.p
        rewards, right = score_group([s.action for s in samples], state.references, p)
        self.pool.record(state, all(right))
        probe = (state.probe_right, state.probe_samples) if p.competence == "group_and_probe" else (0, 0)
        reason = gate(group_statistics(rewards, right, *probe), p)
        decision: Decision
        if reason is not None:
            decision = "anchored" if p.anchors(reason) else "rejected"
        else:
            decision = "accepted" if sampled.n_accepted < sampled.wanted else "surplus"
        advantages = (
            group_advantages(torch.tensor([rewards]), p)[0].tolist() if decision == "accepted" else []
        )
        return Group(state, samples, rewards, right, reason, decision, advantages, sampled.rounds,
                     self.sampler.version)  # fmt: skip

    def _assemble(
        self, policy, sampled: SampledBatch, replayed: list[PreparedState], states: list[PreparedState]
    ) -> dict:
        """The rows [accepted samples; anchored references; replayed references], one forward for every term, with
        their masks, images and counts (a :class:`RolledOutBatch` up to ``loss_tokens``). With nothing to train, one reference row keeps every process's
        forward/backward in step (DDP) and contributes exactly zero."""
        accepted = [(s, a, g.state) for g in sampled.decided("accepted")
                    for s, a in zip(g.samples, g.advantages, strict=True)]  # fmt: skip
        anchored = [g.state for g in sampled.decided("anchored")]
        references = anchored + replayed
        rows = references or ([] if accepted else states[:1])
        prompts = [s.prompt_ids for s, _, _ in accepted] + [s.prompt_ids for s in rows]
        replies = [s.completion_ids for s, _, _ in accepted] + [s.reply_ids for s in rows]
        width = max(len(r) for r in replies)
        device = next(policy.parameters()).device

        def padded(masks: list[list[int]]) -> torch.Tensor:
            return torch.tensor(
                [m + [0] * (width - len(m)) for m in masks], dtype=torch.long, device=device
            ).reshape(len(masks), width)

        anchor_mask = padded([s.reply_action_mask for s in anchored])
        replay_mask = padded([[1] * len(s.reply_ids) for s in replayed])
        completion_mask = padded([[1] * len(s.completion_ids) for s, _, _ in accepted])
        vision = vision_inputs([g.row for _, _, g in accepted] + [s.row for s in rows], self.prompt_config,
                               self.processor)  # fmt: skip
        n_acc = len(accepted)
        # nothing to learn: no accepted sample with a non-zero advantage, nothing anchored or replayed, no KL
        learnable = bool(references) or (self.p.beta > 0 and n_acc > 0) or any(a != 0 for _, a, _ in accepted)
        counts = StepCounts(
            completion=int(completion_mask.sum()), anchor=int(anchor_mask.sum()), replay=int(replay_mask.sum()),
            kl=int(completion_mask.sum() + anchor_mask.sum() + replay_mask.sum()), reply=n_acc,
            accepted_group=sampled.n_accepted, anchored_group=len(anchored),
        )  # fmt: skip
        return {
            "prompts": prompts,
            "replies": replies,
            **{k: v.to(device) for k, v in vision.items()},  # top level: the loop moves and saves them
            "n_accepted": n_acc,
            "n_anchored": len(anchored),
            "learnable": learnable,
            "advantages": torch.tensor([a for _, a, _ in accepted], device=device),
            "anchor_mask": anchor_mask,
            "replay_mask": replay_mask,
            # the loop's loss contract (training/loop.py): this micro-batch's counts; the loop hands back the
            # step's totals over micro-batches and processes as step_tokens
            "loss_tokens": asdict(counts),
        }

    def _freeze(self, policy, batch: dict, sharded: bool) -> dict[str, torch.Tensor | None]:
        """log pi_old of the accepted rows (mu > 1) and log pi_ref of every trained row (beta > 0), frozen for the
        batch's mu updates. Sharded weights: every process runs these forwards (collectives), rows or not."""
        n_acc, prompts, replies = batch["n_accepted"], batch["prompts"], batch["replies"]
        # the rows of every term; the placeholder row of an empty batch trains nothing
        trained = n_acc + batch["n_anchored"] + batch["replay_mask"].shape[0]
        vision = self._vision(batch)
        return {
            "old_logp": (
                self._logprobs(policy, prompts, replies, vision, n_acc)[:n_acc]
                if self.updates_per_batch > 1 and (n_acc or sharded)
                else None
            ),
            "ref_logp": (
                self._reference_logprobs(policy, prompts, replies, vision, n_acc)[:trained]
                if self.p.beta > 0 and (trained or sharded)
                else None
            ),
        }

    def _rollout_metrics(
        self,
        sampled: SampledBatch,
        replayed: list[PreparedState],
        sampling_seconds: float,
        reload_seconds: float,
    ) -> dict[str, float]:
        """What the batch's groups were (``train/<name>``, logged with each of its mu updates)."""
        groups = sampled.groups
        n_accepted, n_anchored = sampled.n_accepted, len(sampled.decided("anchored"))
        rejections = {reason: sum(g.reason == reason for g in groups) for reason in REJECT_REASONS}
        rewards = [r for g in groups for r in g.rewards]
        right = [flag for g in groups for flag in g.right]
        parsed = [s.action is not None for g in groups for s in g.samples]
        groups_seen, n_samples = max(1, len(groups)), max(1, len(rewards))
        return {
            "groups": float(len(groups)),
            "rounds": float(sampled.rounds),
            "accepted_groups": float(n_accepted),
            "anchored_groups": float(n_anchored),
            "discarded_groups": float(len(sampled.decided("rejected")) + len(sampled.decided("surplus"))),
            "replayed_states": float(len(replayed)),
            "acceptance_rate": (len(groups) - sum(rejections.values())) / groups_seen,
            **{f"rejected_{reason}": count / groups_seen for reason, count in rejections.items()},
            "trained_groups": float(n_accepted + n_anchored),
            "anchor_share": n_anchored / groups_seen,
            "pool_states": float(len(self.pool.active())),
            "saturated_states": float(len(self.pool.saturated)),
            "mean_reward": sum(rewards) / n_samples,
            "competence": sum(right) / n_samples,
            "valid_rate": sum(parsed) / n_samples,
            "sampled_actions": float(len(rewards)),
            "sampled_actions_total": float(self.pool.sampled_actions),
            "policy_version": float(self.sampler.version),
            "sampling_seconds": sampling_seconds,  # generation (and scoring) of the batch's groups
            "reload_seconds": reload_seconds,  # served: saving and loading the adapter into the server
        }

    def _log_groups(self, groups: list[Group]) -> None:
        """Append this batch's group records (each process its own, with its rank) to ``group_log``."""
        if self.group_log is None or not groups:
            return
        import json

        rank, _ = rank_and_world(self.accelerator)
        records = [
            {"batch": self.batches, "round": g.round, "state_id": g.state.state_id,
             "origin": g.state.row.get("origin"),  # why mining chose the state (absent in older tables: null)
             "policy_version": g.policy_version,  # the weights that sampled it
             "samples": [format_action(s.action) if s.action else f"<invalid: {s.error}>" for s in g.samples],
             "rewards": g.rewards, "n_right": sum(g.right), "decision": g.decision, "reason": g.reason}
            for g in groups
        ]  # fmt: skip
        self.group_log.parent.mkdir(parents=True, exist_ok=True)
        with self.group_log.open("a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r | {"rank": rank}) + "\n" for r in records)

    # ---------------------------------------------------------------- the loss

    def __call__(self, model, batch: RolledOutBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """The loop's ``loss_fn``: this micro-batch's share of L (objective.py) with the current pi_theta."""
        n_acc, n_anc, n_rep = batch["n_accepted"], batch["n_anchored"], batch["replay_mask"].shape[0]
        logits, targets, mask = continuation_logits(
            model, batch["prompts"], batch["replies"], self.pad_id, self._vision(batch), self.image_token_id
        )
        logp = token_logprobs(logits, targets, self._temperatures(logits.shape[0], n_acc, logits.device))
        acc_mask = mask[:n_acc]
        old_logp = batch["old_logp"] if batch["old_logp"] is not None else logp[:n_acc].detach()
        # rows [accepted; anchored; replayed], then the placeholder row of an empty batch (never trained)
        trained = torch.cat([acc_mask, batch["anchor_mask"], batch["replay_mask"]])
        parts = salvage_ds_loss(
            self.p,
            StepCounts.of(
                batch.get("step_tokens") or batch["loss_tokens"]
            ),  # the step's (or this batch's alone)
            sampled=SampledRows(logp[:n_acc], acc_mask, old_logp, batch["advantages"]),
            anchored=Rows(logp[n_acc : n_acc + n_anc], batch["anchor_mask"]),
            replayed=Rows(logp[n_acc + n_anc : n_acc + n_anc + n_rep], batch["replay_mask"]),
            reference=Rows(batch["ref_logp"], trained) if batch["ref_logp"] is not None else None,
        )
        # every parameter in the graph, so DDP finds each one's gradient (zero where no term uses it)
        loss = parts.loss + 0.0 * logp.sum()

        entropy = token_entropy(logits[: trained.shape[0]], self.p.temperature)[trained.bool()]
        n_tokens = max(1, int(acc_mask.sum()))
        # CleanRL's approx_kl of pi_theta to pi_old, and rho: 0 and 1 at a batch's first update
        with torch.no_grad():
            log_ratio = (logp[:n_acc] - old_logp) * acc_mask
            approx_kl = float(((log_ratio.exp() - 1) - log_ratio).sum()) / n_tokens
            ratio_mean = 1.0 + float(((log_ratio.exp() - 1) * acc_mask).sum()) / n_tokens
        metrics = {
            **batch["rollout_metrics"],
            "surrogate": float(parts.surrogate.detach()),
            "anchor_nll": float(parts.anchor.detach()),
            "replay_nll": float(parts.replay.detach()),
            "kl": float(parts.kl.detach()),
            "clip_fraction": parts.clipped_tokens / n_tokens,
            "approx_kl_old": approx_kl,
            "ratio_mean": ratio_mean,  # rho over the completion tokens (1 with none)
            "entropy": float(entropy.mean()) if entropy.numel() else 0.0,
        }
        return loss, metrics

    def _temperatures(self, rows: int, sampled: int, device) -> torch.Tensor:
        """(rows, 1, 1): the sampling temperature for the first ``sampled`` rows (pi_old sampled them at it), 1 for
        the reference rows (anchored, replayed: the policy's own distribution)."""
        return torch.tensor([self.p.temperature] * sampled + [1.0] * (rows - sampled), device=device).view(
            -1, 1, 1
        )

    @staticmethod
    def _vision(batch: dict) -> dict[str, torch.Tensor]:
        return {k: batch[k] for k in ("pixel_values", "image_grid_thw") if k in batch}

    def _logprobs(
        self, model, prompts, replies, vision: dict[str, torch.Tensor], sampled: int
    ) -> torch.Tensor:
        """log pi (no gradient) of every training row under ``model`` (pi_old, or pi_ref), shaped like the training
        forward's (the same rows, width and temperatures: the first ``sampled`` rows at the sampling temperature);
        padding positions are masked out of the loss."""
        with torch.no_grad():
            logits, targets, _ = continuation_logits(
                model, prompts, replies, self.pad_id, vision, self.image_token_id
            )
            return token_logprobs(
                logits, targets, self._temperatures(logits.shape[0], sampled, logits.device)
            )

    def _reference_logprobs(
        self, policy, prompts, replies, vision: dict[str, torch.Tensor], sampled: int
    ) -> torch.Tensor:
        """log pi_ref of every training row: the reference model's, or the policy's with its adapter disabled."""
        if self.reference_model is not None:
            device = next(policy.parameters()).device
            return self._logprobs(self.reference_model.to(device), prompts, replies, vision, sampled)
        if not hasattr(policy, "disable_adapter"):
            raise ValueError(
                "beta > 0 needs the frozen reference: a LoRA policy (the reference is its adapter disabled) or a "
                "reference_model (a full-weight copy of the SFT policy)"
            )
        with policy.disable_adapter():
            return self._logprobs(policy, prompts, replies, vision, sampled)
