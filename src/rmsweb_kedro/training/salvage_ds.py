r"""Salvage-DS: group-relative RL at the level of one action, with a gate, dynamic sampling and an action-only anchor.

For each critical state :math:`s_g` the current policy samples a group of G replies
:math:`o_{g,1..G}` (thought + action) with their token log-probabilities under the sampling policy
:math:`\pi_{old}`. Each reply is scored against the state's **reference set** :math:`\mathcal{Y}^*_g`
(``schema.reference_set``: the reference action and every action the sandbox established as equivalent there,
e.g. pressing Enter in a form's text field for its submit button; web/sandbox/reference.py):

    r_{g,i} = r_pos      if the reply's action is semantically equal to an action of the reference set
            = r_neg      if it parses but does something else
            = r_invalid  if it does not parse                        (no partial credit)

Group statistics: :math:`\mu_g = mean_i r_{g,i}`, :math:`\sigma_g = std_i r_{g,i}` (population std) and the
**competence** :math:`c_g`, the share of right replies among the group's G samples *and* the K samples the mining
probe drew on the same state (``critical_states.sampled_actions``, re-scored against the reference set):

    c_g = (#right among o_{g,1..G} + #right among the probe's K) / (G + K)       (competence: group_and_probe)
    c_g = #right among o_{g,1..G} / G                                            (competence: group)

With the group alone and r_neg = r_invalid, a group contrasts exactly when 0 < c_g < 1, so a band wider than
[1/G, 1 - 1/G] never binds; pooling with the probe's samples gives a (G + K)-sample estimate whose band tests act
(1 right of 8 on a state the probe never got right is c_g = 1/12: too hard). The
**contrast-and-competence gate** accepts a group when

    \sigma_g > \tau_contrast   and   c_low <= c_g <= c_high

and otherwise rejects it with one reason: ``all_right`` or ``all_wrong`` (no contrast: every reward equal, every
sample right, or not), ``too_hard`` (c_g < c_low) or ``too_easy`` (c_g > c_high). Accepted groups :math:`\mathcal{A}`
get group-relative advantages

    \hat A_{g,i} = (r_{g,i} - \mu_g) / (\sigma_g + \epsilon_std)    (or r_{g,i} - \mu_g when scale_by_std is off)

and the rejected groups the ``anchor`` rule names, :math:`\mathcal{R}` (``failing``: the ones the policy fails,
``all_wrong`` and ``too_hard``; ``all``: every rejected group), get the **action-only anchor** *beside* them: the
negative log-likelihood of the tokens of the reference *action* :math:`y^*_g` (the thought masked out).

**Dynamic sampling** (DAPO's, Yu et al. 2025, sec. 3.2; verl's ``max_num_gen_batches``): a batch is filled with
*accepted* groups. A step samples groups for B states (B = ``loop.batch_size``) and, while it holds fewer than B
accepted groups, samples another round of B states drawn from the pool (states not yet drawn in this batch) until
B are accepted or ``max_rounds`` rounds are spent (under several processes each fills its share of B,
resampling from its own shard of the pool). Anchored groups ride along and never count toward B; accepted
groups past B (``surplus``) and rejected groups the rule does not anchor are discarded (``train/discarded_groups``,
``train/rounds``). A state whose groups were all right in ``saturation_draws`` consecutive draws has been learnt:
it **leaves the pool** (``train/pool_states``, ``train/saturated_states``). A step that ends with nothing to learn
(no accepted group with a non-zero advantage, nothing anchored, no replay) takes no optimizer step.
``sampled_action_budget`` caps the sampled actions of a run, so modes are compared at equal sampling cost.

With the token ratio :math:`\rho_{g,i,t} = \pi_\theta(o_{g,i,t} | s_g, o_{g,i,<t}) / \pi_{old}(o_{g,i,t} | s_g,
o_{g,i,<t})`, the per-token surrogate :math:`\ell_{g,i,t} = -min(\rho \hat A_{g,i}, clip(\rho, 1-\epsilon_low,
1+\epsilon_high) \hat A_{g,i})` and the group shares :math:`w_A = |A| / (|A| + |R|)`, :math:`w_R = |R| / (|A| +
|R|)`, the total loss of one optimizer step is

    L(\theta) = w_A \cdot 1/N_o \sum_{g \in A} \sum_i \sum_t \ell_{g,i,t}
              + \lambda \cdot w_R \cdot 1/N_a \sum_{g \in R} \sum_{t \in action(y^*_g)} -log \pi_\theta(y^*_{g,t} | s_g, y^*_{g,<t})
              + \eta \cdot 1/N_p \sum_{s \in P} \sum_{t \in y^*_s} -log \pi_\theta(y^*_{s,t} | s, y^*_{s,<t})
              + \beta \cdot 1/N_k \sum_{every trained token} D_k3

    D_k3 = \pi_ref / \pi_\theta - log(\pi_ref / \pi_\theta) - 1     (\pi_ref: the frozen SFT policy, per token)

where :math:`N_o` is the number of completion tokens of accepted groups, :math:`N_a` the number of anchored
action tokens, :math:`P` the step's **SFT replay** states (``replay_states`` drawn from the SFT training states,
whole reference replies, :math:`N_p` tokens; weight :math:`\eta`, 0: none) and :math:`N_k = N_o + N_a + N_p` (the
KL to SFT holds on every row the step trains: sampled, anchored and replayed). Token-level aggregation inside each
term: every token weighs the same, long replies do not dilute. The shares make :math:`\lambda` mean what it says:
an anchored group weighs :math:`\lambda` times an accepted group, whatever the accepted/rejected mix. A term with no
tokens is zero.

**Updates per batch** :math:`\mu` (``loop.updates_per_batch``): the groups are sampled once, and L is minimised
for :math:`\mu` optimizer steps on them with :math:`\pi_{old}`, the rewards, the gate's decisions and
:math:`\hat A` frozen (``SalvageDSStep.rollout``). At the first of the :math:`\mu` updates
:math:`\pi_\theta = \pi_{old}`, so :math:`\rho = 1` and nothing is clipped; from the second on :math:`\rho`
moves and the clip bounds it (docs/salvage_ds.md, "Choosing the defaults").

**No harm by construction**: the stage scores the policy on a dev split (``sft_states_dev``: states neither SFT,
Salvage-DS's training nor ``evaluate`` uses) before training and every ``loop.eval_every`` updates, and the loop
returns the best of those checkpoints, step 0 (the SFT policy) included (``LoopConfig.select_metric``).

The modes (``mode``), each what its name says:

    grpo                  DeepSeekMath's GRPO as TRL implements it (loss_type "grpo"): every group, per-sequence
                          mean (1/G \sum_i 1/|o_i| \sum_t) instead of the token mean, symmetric clip
                          (\epsilon_high = \epsilon_low), no dynamic sampling, no anchor
    dapo                  DAPO: token mean, clip-higher (\epsilon_high), dynamic sampling over the contrast filter
                          (\sigma_g > \tau_contrast), rejected groups discarded
    salvage_ds            the full gate, dynamic sampling, the rejected groups ``anchor`` names anchored, weight
                          \lambda
    salvage_ds_no_anchor  the full gate, dynamic sampling, rejected groups discarded

Several processes: ``accelerate launch ... -m rmsweb_kedro.training.salvage_ds --job JOB.json`` (the
``salvage_ds`` node starts it when ``launch`` names a config; ``training.launch``, the design SFT shares); ``JOB.json``:
``{"model_dir", "checkpoint", "train_path", "dev_path", "replay_path", "output_dir", "config": SalvageDSJob}``
(``checkpoint``: the load config of ``model_dir``, ``training.launch.job_checkpoint``; absent: path and dtype auto).
The ``served`` sampler runs there too (DDP or FSDP2): the main process serves, every process samples. Under FSDP2 and
ZeRO-3 the policy's weights are sharded: the loop turns on synced generation, so every process keeps stepping the
forwards of ``generate`` until the longest reply of any process is done.

Every symbol is a field of :class:`SalvageDSParams` (``conf/base/parameters_salvage_ds.yml``), except
:math:`\mu` and B, fields of the shared loop's ``LoopConfig``. The partial-credit reward (type / target / argument
weighted, the usual GUI-RL design) is kept as an ablation: ``reward: partial``.

One module because the algorithm reads top to bottom as the paper does, with its names: rewards, the gate,
advantages, the loss, the anchor's token mask and the step that ties them together (CleanRL's single-file
style); where the groups come from (the hf and served samplers) is training/sampling.py.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rmsweb_kedro.contracts.actions import (
    Action,
    format_action,
    matches_any,
    normalized_argument,
    same_target,
)
from rmsweb_kedro.contracts.prompts import PromptConfig
from rmsweb_kedro.training.loop import LoopConfig
from rmsweb_kedro.training.sampling import (
    GroupSampler,
    HFSampler,
    PreparedState,
    SamplerConfig,
    is_sharded,
    make_sampler,
    on_every_process,
)

Mode = Literal["grpo", "dapo", "salvage_ds", "salvage_ds_no_anchor"]
RejectReason = Literal["all_right", "all_wrong", "too_easy", "too_hard"]
#: The file under the loop's output_dir holding every sampled group, one JSON a line: the sampled batch and its
#: generation round, the state, the policy version that sampled it, the G samples (canonical texts, ``<invalid:
#: reason>``), their rewards and how many are right, the gate's decision (accepted; anchored; rejected, discarded;
#: surplus, accepted past B and discarded) and reason, and the process; the ``salvage_ds`` stage gathers every
#: seed's into ``salvage_ds_groups`` (``pipelines/salvage_ds/nodes.GROUPS_SCHEMA``).
GROUP_LOG = "groups.jsonl"
REJECT_REASONS: tuple[RejectReason, ...] = ("all_right", "all_wrong", "too_easy", "too_hard")
#: The rejected groups each ``anchor`` rule anchors: ``failing``, the groups the policy fails (below the band or
#: never right); ``all``, every rejected group (a state already solved is anchored too: SFT on what it knows).
ANCHORED_REASONS: dict[str, frozenset[str]] = {
    "failing": frozenset({"all_wrong", "too_hard"}),
    "all": frozenset(REJECT_REASONS),
}


class SalvageDSParams(BaseModel):
    """The symbols of the loss (names as in the module docstring) and the sampling and optimisation settings."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode = "salvage_ds"
    # reward
    reward: Literal["polarized", "partial"] = "polarized"
    r_pos: float = 1.0
    r_neg: float = -1.0
    r_invalid: float = -1.0
    w_type: float = 0.2  # partial-credit ablation only
    w_target: float = 0.4
    w_argument: float = 0.4
    # groups and gate
    group_size: int = Field(8, ge=2)  # G
    tau_contrast: float = Field(1e-6, ge=0.0)
    competence: Literal["group_and_probe", "group"] = "group_and_probe"
    c_low: float = Field(0.15, ge=0.0, le=1.0)
    c_high: float = Field(0.85, ge=0.0, le=1.0)
    anchor: Literal["failing", "all"] = "failing"  # which rejected groups are anchored (ANCHORED_REASONS)
    # dynamic sampling
    max_rounds: int = Field(4, ge=1)  # generation rounds (of B states each) at most per sampled batch
    saturation_draws: int | None = Field(
        2, ge=1
    )  # all right this many draws in a row: the state leaves the pool
    sampled_action_budget: int | None = Field(None, ge=1)  # sampled actions of the whole run; None: no cap
    # objective
    scale_by_std: bool = True
    eps_std: float = Field(1e-4, gt=0.0)
    eps_low: float = Field(0.2, ge=0.0, lt=1.0)
    eps_high: float = Field(0.28, ge=0.0)  # clip-higher; grpo clips symmetrically at eps_low
    beta: float = Field(0.0, ge=0.0)  # weight of D_k3 to the frozen SFT policy on every row; 0: no reference
    lam: float = Field(0.5, ge=0.0)  # anchor weight lambda: an anchored group weighs lam accepted groups
    eta: float = Field(0.0, ge=0.0)  # weight of the SFT replay term; 0: no replay
    replay_states: int = Field(4, ge=1)  # P: SFT training states replayed each sampled batch (eta > 0)
    # sampling (the policy that produces pi_old)
    temperature: float = Field(1.0, gt=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(48, ge=1)

    @model_validator(mode="after")
    def _band(self) -> SalvageDSParams:
        if self.c_low > self.c_high:
            raise ValueError(f"c_low ({self.c_low}) must not exceed c_high ({self.c_high})")
        return self

    @property
    def anchor_weight(self) -> float:
        """lambda as the mode uses it: only ``salvage_ds`` anchors rejected groups."""
        return self.lam if self.mode == "salvage_ds" else 0.0

    def anchors(self, reason: RejectReason) -> bool:
        """Whether a group rejected for ``reason`` gets the anchor (the mode anchors, and ``anchor`` names it)."""
        return self.anchor_weight > 0 and reason in ANCHORED_REASONS[self.anchor]

    @property
    def clip_high(self) -> float:
        """The upper clip epsilon: symmetric (eps_low) in ``grpo``, clip-higher (eps_high) otherwise."""
        return self.eps_low if self.mode == "grpo" else self.eps_high

    @property
    def sequence_mean(self) -> bool:
        """``grpo`` averages tokens within each reply, then replies; the others average all tokens together."""
        return self.mode == "grpo"

    @property
    def dynamic_sampling(self) -> bool:
        """Every mode with a gate samples further groups until the batch is full (``max_rounds`` at most)."""
        return self.mode != "grpo"


# ---------------------------------------------------------------- rewards


def polarized_reward(action: Action | None, references: list[Action], p: SalvageDSParams) -> float:
    """r_pos for an action equal to one of the reference set, r_neg for any other action, r_invalid when it did
    not parse."""
    if action is None:
        return p.r_invalid
    return p.r_pos if matches_any(action, references) else p.r_neg


def partial_credit_reward(action: Action | None, references: list[Action], p: SalvageDSParams) -> float:
    """Ablation: w_type for the right type, + w_target for the right target, + w_argument for the right argument
    (each part counts only when the parts before it are right); the best over the references."""
    if action is None:
        return p.r_invalid

    def credit(ref: Action) -> float:
        if action.type != ref.type:
            return 0.0
        if not same_target(action, ref):
            return p.w_type
        if normalized_argument(action) != normalized_argument(ref):
            return p.w_type + p.w_target
        return p.w_type + p.w_target + p.w_argument

    return max((credit(ref) for ref in references), default=0.0)


def reward(action: Action | None, references: list[Action], p: SalvageDSParams) -> float:
    """The reward ``p.reward`` names."""
    scorer = polarized_reward if p.reward == "polarized" else partial_credit_reward
    return scorer(action, references, p)


# ---------------------------------------------------------------- group statistics and the gate


@dataclass(frozen=True)
class GroupStats:
    """mu_g, sigma_g (population std), the competence c_g of one group and the share of its own G samples that are
    right (c_g without the probe)."""

    mean: float
    std: float
    competence: float
    share_right: float


def group_statistics(
    rewards: list[float], right: list[bool], probe_right: int = 0, probe_samples: int = 0
) -> GroupStats:
    """Statistics of one group from its rewards and whether each sample was right; the competence pools the
    group with ``probe_right`` right samples of ``probe_samples`` drawn on the same state by the mining probe."""
    if not rewards or len(rewards) != len(right):
        raise ValueError(
            f"a group needs one 'right' flag per reward; got {len(rewards)} rewards, {len(right)} flags"
        )
    if not 0 <= probe_right <= probe_samples:
        raise ValueError(f"probe_right ({probe_right}) must lie in [0, probe_samples ({probe_samples})]")
    r = torch.tensor(rewards, dtype=torch.float64)
    competence = (sum(right) + probe_right) / (len(right) + probe_samples)
    return GroupStats(float(r.mean()), float(r.std(correction=0)), competence, sum(right) / len(right))


def gate(stats: GroupStats, p: SalvageDSParams) -> RejectReason | None:
    """None when the group is accepted for the clipped objective, else why it is rejected (see the modes)."""
    if p.mode == "grpo":
        return None
    if stats.std <= p.tau_contrast:  # no contrast: all right, or not (none right; rewards that cannot tell)
        return "all_right" if stats.share_right == 1.0 else "all_wrong"
    if p.mode == "dapo":
        return None
    if stats.competence < p.c_low:
        return "too_hard"
    if stats.competence > p.c_high:
        return "too_easy"
    return None


def group_advantages(rewards: torch.Tensor, p: SalvageDSParams) -> torch.Tensor:
    """A_hat of the samples of one or more groups: ``rewards`` is (groups, G), the result has the same shape."""
    centred = rewards - rewards.mean(dim=-1, keepdim=True)
    if not p.scale_by_std:
        return centred
    return centred / (rewards.std(dim=-1, keepdim=True, correction=0) + p.eps_std)


# ---------------------------------------------------------------- per-token terms


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log pi(token_t | prefix) for every position: ``logits`` (B, T, V) already aligned with ``tokens`` (B, T).
    The temperature is the sampling temperature, so pi_theta and pi_old are the same distribution family."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of the policy at every position (B, T); a metric, computed without gradient."""
    with torch.no_grad():
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        return -(logp.exp() * logp).sum(-1)


def clipped_surrogate(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, p: SalvageDSParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token -min(rho A, clip(rho, 1-eps_low, 1+clip_high) A) and where the clip is active (bool).

    ``advantages`` broadcasts against the token tensors (one value per sample: shape (B, 1))."""
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - p.eps_low, 1.0 + p.clip_high) * advantages
    return -torch.minimum(unclipped, clipped), (clipped < unclipped)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """D_k3 = pi_ref/pi_theta - log(pi_ref/pi_theta) - 1 per token: non-negative, unbiased for KL(pi_theta||pi_ref)."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1.0


def _rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of processes (0, 1 without torch.distributed)."""
    if torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


@dataclass
class LossParts:
    """The terms of L for one (micro-)batch, already divided by the step's token counts N_o, N_a, N_p and N_k (or,
    in ``grpo``, the surrogate by the step's reply count) and weighted, so the parts of several micro-batches of one
    step add up to the step's loss. ``surrogate``/``anchor``/``replay``/``kl`` are the unweighted means (metrics)."""

    loss: torch.Tensor
    surrogate: torch.Tensor
    kl: torch.Tensor
    anchor: torch.Tensor
    replay: torch.Tensor
    clipped_tokens: int


def salvage_ds_loss(
    p: SalvageDSParams,
    *,
    logp: torch.Tensor | None = None,
    old_logp: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    completion_mask: torch.Tensor | None = None,
    n_completion_tokens: int = 0,
    n_replies: int = 0,
    anchor_logp: torch.Tensor | None = None,
    anchor_mask: torch.Tensor | None = None,
    n_anchor_tokens: int = 0,
    replay_logp: torch.Tensor | None = None,
    replay_mask: torch.Tensor | None = None,
    n_replay_tokens: int = 0,
    ref_logp: torch.Tensor | None = None,
    ref_mask: torch.Tensor | None = None,
    n_kl_tokens: int = 0,
    accepted_groups: int = 0,
    anchored_groups: int = 0,
) -> LossParts:
    """L (module docstring) for the accepted samples (``logp``/``old_logp``/``completion_mask``: (B, T);
    ``advantages``: (B,)), the anchored references (``anchor_logp``/``anchor_mask``: (B', T')) and the replayed SFT
    states (``replay_logp``/``replay_mask``: (B'', T'')). The KL term takes every trained row at once:
    ``ref_logp`` (log pi_ref) and ``ref_mask`` are the rows ``[accepted; anchored; replayed]`` stacked, padded to one
    width, aligned with the same rows of pi_theta.

    Counts are over the whole optimizer step: ``n_completion_tokens`` (N_o), ``n_replies`` (accepted replies, the
    divisor of ``grpo``'s per-sequence mean), ``n_anchor_tokens`` (N_a), ``n_replay_tokens`` (N_p),
    ``n_kl_tokens`` (N_k) and the groups accepted (|A|) and anchored (|R|) that make the shares w_A and w_R."""
    zero = torch.zeros(())
    surrogate, kl, anchor, replay, clipped_tokens = zero, zero, zero, zero, 0
    if n_completion_tokens > 0 and accepted_groups <= 0:
        raise ValueError("completion tokens need accepted_groups > 0 (the share w_A weighs the surrogate)")
    if n_anchor_tokens > 0 and p.anchor_weight > 0 and anchored_groups <= 0:
        raise ValueError("anchor tokens need anchored_groups > 0 (the share w_R weighs the anchor)")
    groups = accepted_groups + anchored_groups
    w_accepted = accepted_groups / groups if groups else 0.0
    w_anchored = anchored_groups / groups if groups else 0.0
    if logp is not None and n_completion_tokens > 0:
        assert old_logp is not None and advantages is not None and completion_mask is not None
        mask = completion_mask.to(logp.dtype)
        if p.sequence_mean:  # each reply's tokens averaged, then the replies: 1/n_replies sum_i 1/|o_i| sum_t
            if n_replies <= 0:
                raise ValueError(
                    "grpo's per-sequence mean needs n_replies > 0 when there are completion tokens"
                )
            weights = mask / mask.sum(-1, keepdim=True).clamp(min=1) / n_replies
        else:
            weights = mask / n_completion_tokens
        per_token, clipped = clipped_surrogate(logp, old_logp, advantages.unsqueeze(-1), p)
        surrogate = (per_token * weights).sum()
        clipped_tokens = int((clipped & completion_mask.bool()).sum())
    if anchor_logp is not None and n_anchor_tokens > 0 and p.anchor_weight > 0:
        assert anchor_mask is not None
        anchor = -(anchor_logp * anchor_mask.to(anchor_logp.dtype)).sum() / n_anchor_tokens
    if replay_logp is not None and n_replay_tokens > 0 and p.eta > 0:
        assert replay_mask is not None
        replay = -(replay_logp * replay_mask.to(replay_logp.dtype)).sum() / n_replay_tokens
    if p.beta > 0 and n_kl_tokens > 0:
        if ref_logp is None or ref_mask is None:
            raise ValueError("beta > 0 needs the reference log-probabilities (ref_logp) of every trained row")
        rows = [t for t in (logp, anchor_logp, replay_logp) if t is not None and t.shape[0]]
        width = ref_logp.shape[-1]
        theta = torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[-1])) for t in rows])
        kl = (k3_kl(theta, ref_logp) * ref_mask.to(theta.dtype)).sum() / n_kl_tokens
    loss = w_accepted * surrogate + p.anchor_weight * w_anchored * anchor + p.eta * replay + p.beta * kl
    return LossParts(
        loss=loss, surrogate=surrogate, kl=kl, anchor=anchor, replay=replay, clipped_tokens=clipped_tokens
    )


# ---------------------------------------------------------------- the anchor's token mask

_ACTION_CALL = re.compile(r"^[ \t]*action[ \t]*:[ \t]*(\S.*?)[ \t]*$", re.IGNORECASE | re.MULTILINE)
_THOUGHT_TEXT = re.compile(r"^[ \t]*thought[ \t]*:(.*)$", re.IGNORECASE | re.MULTILINE)


def action_char_span(reply: str) -> tuple[int, int]:
    """[start, end) of the action call inside an assistant reply (``format_reply``: 'Thought: ...\\nAction: call')."""
    matches = list(_ACTION_CALL.finditer(reply))
    if len(matches) != 1:
        raise ValueError(
            f"the reference reply must hold exactly one 'Action:' line, found {len(matches)}: {reply!r}"
        )
    return matches[0].span(1)


def action_token_mask(offsets: list[tuple[int, int]], reply: str) -> list[int]:
    """1 for the reply tokens that belong to the action call, 0 for all others (the thought, 'Action:', ...).

    ``offsets`` are the tokenizer's character offsets of the reply's tokens (``return_offsets_mapping``). A token
    is in the action when it overlaps the action's span and overlaps no character of the thought line, so a
    token that straddles both (possible with byte-level BPE) is left out and no gradient reaches the thought."""
    start, end = action_char_span(reply)
    thought = _THOUGHT_TEXT.search(reply)
    t_start, t_end = thought.span() if thought else (0, 0)

    def overlaps(a: int, b: int, lo: int, hi: int) -> bool:
        return a < hi and lo < b

    return [int(overlaps(a, b, start, end) and not overlaps(a, b, t_start, t_end)) for a, b in offsets]


# ================================================================ training on the shared loop
# Only what differs from SFT: a "sample" is a prepared state. The loop's rollout samples G replies per state with
# the current policy (a GroupSampler: hf in this process, or served by vLLM), scores and gates the groups and freezes
# pi_old; its loss_fn then takes mu = updates_per_batch gradient steps on L with those samples.


def probe_counts(row: dict, references: list[Action]) -> tuple[int, int]:
    """``(K, right)``: the mining probe's sampled actions of a state (``sampled_actions``: canonical texts, or
    ``<invalid: reason>``; absent or null when the state was not probed) and how many are in the reference set."""
    from rmsweb_kedro.contracts.actions import ActionParseError, parse_action

    labels = row.get("sampled_actions") or []
    right = 0
    for label in labels:
        if label.startswith("<invalid"):
            continue
        try:
            right += matches_any(parse_action(label), references)
        except ActionParseError:
            raise ValueError(
                f"state {row.get('state_id')!r}: field sampled_actions holds {label!r}, neither an action nor "
                "'<invalid: reason>'"
            ) from None
    return len(labels), right


def prepare_states(states: list[dict], processor, prompt_config) -> list[PreparedState]:
    """STATE_SCHEMA rows with the policy's prompt (``hf_policy.prompt_inputs``, the sampler's) and reference reply."""
    from rmsweb_kedro.agents.hf_policy import prompt_inputs
    from rmsweb_kedro.contracts.prompts import reference_reply
    from rmsweb_kedro.contracts.schema import reference_set

    tokenizer = processor.tokenizer
    end_of_turn = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    prepared = []
    for row in states:
        references = reference_set(row)
        probe_samples, probe_right = probe_counts(row, references)
        reply = reference_reply(row, prompt_config)
        encoded = tokenizer(reply, add_special_tokens=False, return_offsets_mapping=True)
        mask = action_token_mask(encoded["offset_mapping"], reply)
        prepared.append(
            PreparedState(
                state_id=row["state_id"],
                row=row,
                references=references,
                prompt_ids=prompt_inputs([row], prompt_config, processor)["input_ids"][0].tolist(),
                reply_ids=[*encoded["input_ids"], end_of_turn],
                reply_action_mask=[*mask, 1],  # ending the turn after the action is part of acting
                probe_samples=probe_samples,
                probe_right=probe_right,
            )
        )
    return prepared


def vision_inputs(rows: list[dict], prompt_config, processor) -> dict[str, torch.Tensor]:
    """The image inputs of the prompts of ``rows``, in row order: ``pixel_values`` (patches, C * 2 * 16 * 16) and
    ``image_grid_thw`` (images, 3), what the processor gave the sampler for the same prompts (so a forward over
    their ids sees the same pixels); ``{}`` when the prompts show no screenshot."""
    from PIL import Image

    from rmsweb_kedro.contracts.prompts import build_messages, image_paths

    paths = [path for row in rows for path in image_paths(build_messages(row, prompt_config)[0])]
    if not paths:
        return {}
    images = [Image.open(path).convert("RGB") for path in paths]
    out = processor.image_processor(images=images, return_tensors="pt")
    return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}


def continuation_logits(
    model,
    prompts: list[list[int]],
    continuations: list[list[int]],
    pad_id: int,
    vision: dict[str, torch.Tensor] | None = None,
    image_token_id: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward over prompt + continuation rows: ``(logits (B, C, V), targets (B, C), mask (B, C))`` where
    ``logits[:, t]`` predicts ``targets[:, t]``, the t-th continuation token. Prompts are left-padded and
    continuations right-padded, so the continuations line up and only C + 1 positions of logits are computed
    (the vocabulary of a real model is large). ``vision`` (:func:`vision_inputs` of the rows' states): the
    screenshots the prompts show, passed with ``mm_token_type_ids`` (1 on ``image_token_id``), so the log-probs
    are the policy's given the image."""
    prompt_width = max(len(p) for p in prompts)
    width = max(len(c) for c in continuations)
    ids, attention = [], []
    for prompt, continuation in zip(prompts, continuations, strict=True):
        left, right = prompt_width - len(prompt), width - len(continuation)
        ids.append([pad_id] * left + prompt + continuation + [pad_id] * right)
        attention.append([0] * left + [1] * (len(prompt) + len(continuation)) + [0] * right)
    device = next(model.parameters()).device
    ids_t = torch.tensor(ids, device=device)
    images = {}
    if vision:
        images = {k: v.to(device) for k, v in vision.items()}
        images["mm_token_type_ids"] = (ids_t == image_token_id).long()
    out = model(
        input_ids=ids_t,
        attention_mask=torch.tensor(attention, device=device),
        logits_to_keep=width + 1,
        **images,
    )
    mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in continuations], device=device)
    return out.logits[:, :-1], ids_t[:, prompt_width:], mask


class SalvageDSStep:
    """The shared loop's ``rollout`` and ``loss_fn`` for Salvage-DS (and its ablation modes).

    ``rollout``: sample G replies per state with the current policy, score and gate each group, and, with dynamic
    sampling, sample further rounds of states from ``pool`` until the batch holds B accepted groups or ``max_rounds``
    rounds are spent (the rejected groups the ``anchor`` rule names anchored beside them); draw the batch's SFT
    replay states from ``replay_pool`` (eta > 0); then freeze what the mu updates share: the rows to train (accepted
    samples, anchored references, replayed references), the advantages and, when mu > 1, log pi_old (with mu = 1,
    pi_old is pi_theta at the only update: ``logp.detach()``, one forward less). ``__call__`` (the loss_fn): L
    (module docstring) on those rows with the current pi_theta.

    The run's bookkeeping is checkpointed with the loop (``state_dict``), so a resumed run keeps to
    ``sampled_action_budget`` and to the pool as it was: the sampled actions spent, each state's run of all-right
    draws and the states saturated (left the pool). Each process keeps its own (states are drawn per process).

    Training rows carry their screenshots' image inputs; the frozen reference pi_ref (beta > 0) is
    ``reference_model`` when given, else the policy itself with its LoRA adapter disabled (peft's
    ``disable_adapter()``: no second copy of the weights)."""

    def __init__(
        self,
        p: SalvageDSParams,
        processor,
        prompt_config,
        reference_model=None,
        updates_per_batch: int = 1,
        pool: list[PreparedState] | None = None,
        group_log: str | Path | None = None,
        sampler: GroupSampler | None = None,
        replay_pool: list[PreparedState] | None = None,
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
        self.pool = pool or []
        self.replay_pool = replay_pool or []
        if p.eta > 0 and not self.replay_pool:
            raise ValueError("eta > 0 (SFT replay) needs replay states: pass the SFT training states")
        self.sampled_actions = 0  # spent so far in the run (sampled_action_budget)
        self.streaks: dict[str, int] = {}  # state id -> its latest draws all right in a row
        self.saturated: set[str] = set()  # states that left the pool (saturation_draws all-right draws)
        self.sampler = sampler or HFSampler(processor, prompt_config, p)

    def state_dict(self) -> dict:
        return {
            "sampled_actions": self.sampled_actions,
            "batches": self.batches,
            "policy_version": self.sampler.version,
            "streaks": dict(self.streaks),
            "saturated": sorted(self.saturated),
        }

    def load_state_dict(self, state: dict) -> None:
        self.sampled_actions = int(state["sampled_actions"])
        self.batches = int(state.get("batches", 0))  # absent in checkpoints written before the group log
        # the version of the checkpoint's last groups: the resumed weights sample as the next one, so the
        # versions in groups.jsonl go on rising (absent in checkpoints written before the served sampler)
        self.sampler.version = int(state.get("policy_version", 0))
        self.streaks = {k: int(v) for k, v in state.get("streaks", {}).items()}
        self.saturated = set(state.get("saturated", []))

    def _log_groups(self, records: list[dict]) -> None:
        """Append this batch's group records (each process its own, with its rank) to ``group_log``."""
        if self.group_log is None or not records:
            return
        import json

        rank, _ = _rank_and_world()
        self.group_log.parent.mkdir(parents=True, exist_ok=True)
        with self.group_log.open("a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r | {"rank": rank}) + "\n" for r in records)

    def _budget_left(self) -> bool:
        budget = self.p.sampled_action_budget
        return budget is None or self.sampled_actions < budget

    def active_pool(self) -> list[PreparedState]:
        """The pool's states that have not saturated."""
        return [s for s in self.pool if s.state_id not in self.saturated]

    def _draw(self, states: list[PreparedState], count: int) -> list[PreparedState]:
        """``count`` of ``states`` drawn with the global RNG (the loop checkpoints it: a resumed run draws the same)."""
        order = torch.randperm(len(states))[:count].tolist()
        return [states[i] for i in order]

    def _more_states(self, count: int, drawn: set[str]) -> list[PreparedState]:
        """``count`` further states for another round: active states of this process's shard of the pool
        (``pool[rank::world]``, as a distributed sampler shards a data set) not drawn in this batch yet. Every
        process draws with the same seeded RNG, so without shards they would resample the same states."""
        rank, world = _rank_and_world()
        excluded = self.saturated | drawn
        return self._draw([s for s in self.pool[rank::world] if s.state_id not in excluded], count)

    def _in_step(self, states: list[PreparedState], wanted: int, sharded: bool) -> list[PreparedState]:
        """``states``, or, when sharded weights make generate a collective and this process has nothing left to
        draw, ``wanted`` states re-drawn from the whole pool (saturated ones too) so it keeps generating with the
        others."""
        return self._draw(self.pool, wanted) if sharded and not states else states

    def _first_round(self, states: list[PreparedState], wanted: int) -> list[PreparedState]:
        """The loop's states for this batch, saturated ones replaced by active states drawn from the pool."""
        kept = [s for s in states if s.state_id not in self.saturated]
        if len(kept) < wanted:
            kept += self._more_states(wanted - len(kept), {s.state_id for s in kept})
        return kept

    def _saturate(self, state: PreparedState, all_right: bool) -> None:
        """Count the state's runs of all-right groups; ``saturation_draws`` in a row take it out of the pool."""
        self.streaks[state.state_id] = self.streaks.get(state.state_id, 0) + 1 if all_right else 0
        if self.p.saturation_draws is not None and self.streaks[state.state_id] >= self.p.saturation_draws:
            self.saturated.add(state.state_id)

    def rollout(self, model, batch: dict) -> dict:
        p = self.p
        wanted = len(batch["states"])  # B accepted groups
        policy = getattr(model, "module", model)  # a DDP wrapper has no generate: use the bare module
        accepted: list[tuple[list[int], list[int], float, PreparedState]] = []  # (prompt, reply, A, state)
        anchored: list[PreparedState] = []
        n_accepted_groups, sampled_groups, discarded, rounds = 0, 0, 0, 0
        rejections = dict.fromkeys(REJECT_REASONS, 0)
        rewards_all, right_all, parsed_all = [], [], []
        records: list[dict] = []
        sharded = is_sharded(policy)
        reload_before, started = self.sampler.reload_seconds, time.perf_counter()
        states = self._in_step(self._first_round(batch["states"], wanted), wanted, sharded)
        drawn = {s.state_id for s in states}
        while self._budget_left() and states:
            rounds += 1
            groups = self.sampler.sample(policy, states, p.group_size)
            self.sampled_actions += sum(len(g) for g in groups)
            for state, samples in zip(states, groups, strict=True):
                sampled_groups += 1
                rewards = [reward(s.action, state.references, p) for s in samples]
                right = [matches_any(s.action, state.references) for s in samples]
                rewards_all += rewards
                right_all += right
                parsed_all += [s.action is not None for s in samples]
                self._saturate(state, all(right))
                probe = (
                    (state.probe_right, state.probe_samples) if p.competence == "group_and_probe" else (0, 0)
                )
                reason = gate(group_statistics(rewards, right, *probe), p)
                if reason is not None:
                    rejections[reason] += 1
                    decision = "anchored" if p.anchors(reason) else "rejected"
                else:
                    decision = "accepted" if n_accepted_groups < wanted else "surplus"
                records.append({"batch": self.batches, "round": rounds, "state_id": state.state_id,
                                "policy_version": self.sampler.version,  # the weights that sampled it
                                 "samples": [format_action(s.action) if s.action else f"<invalid: {s.error}>" for s in samples],
                                 "rewards": rewards, "n_right": sum(right), "decision": decision,
                                 "reason": reason})  # fmt: skip
                if decision == "accepted":
                    n_accepted_groups += 1
                    advantages = group_advantages(torch.tensor([rewards]), p)[0].tolist()
                    accepted += [
                        (s.prompt_ids, s.completion_ids, a, state)
                        for s, a in zip(samples, advantages, strict=True)
                    ]
                elif decision == "anchored":
                    anchored.append(state)
                else:  # rejected and not anchored, or accepted past B
                    discarded += 1
            done = n_accepted_groups >= wanted or not p.dynamic_sampling or rounds >= p.max_rounds
            states = [] if done else self._more_states(wanted, drawn)
            if sharded:  # every process generates until the last one is done: generate is a collective then
                done = on_every_process(done or not states, policy)
                if not done:
                    states = self._in_step(states, wanted, sharded)
            if done:
                break
            drawn |= {s.state_id for s in states}
        reload_seconds = self.sampler.reload_seconds - reload_before
        sampling_seconds = time.perf_counter() - started - reload_seconds
        replayed = self._draw(self.replay_pool, p.replay_states) if p.eta > 0 else []

        self._log_groups(records)
        self.batches += 1
        # One forward for every term; with nothing to train, one reference row keeps every process's
        # forward/backward in step (DDP) and contributes exactly zero.
        n_acc = len(accepted)
        references = anchored + replayed
        rows = references or ([] if accepted else batch["states"][:1])
        prompts = [a[0] for a in accepted] + [s.prompt_ids for s in rows]
        replies = [a[1] for a in accepted] + [s.reply_ids for s in rows]
        width = max(len(r) for r in replies)
        device = next(policy.parameters()).device

        def padded(masks: list[list[int]]) -> torch.Tensor:
            return torch.tensor(
                [m + [0] * (width - len(m)) for m in masks], dtype=torch.long, device=device
            ).reshape(len(masks), width)

        anchor_mask = padded([s.reply_action_mask for s in anchored])
        replay_mask = padded([[1] * len(s.reply_ids) for s in replayed])
        completion_mask = padded([[1] * len(a[1]) for a in accepted])
        vision = vision_inputs(
            [a[3].row for a in accepted] + [s.row for s in rows], self.prompt_config, self.processor
        )
        vision = {k: v.to(device) for k, v in vision.items()}
        groups_seen = max(1, sampled_groups)
        n_samples = max(1, len(rewards_all))
        trained = len(prompts) - (0 if references or accepted else 1)  # the placeholder row trains nothing
        return {
            "prompts": prompts,
            "replies": replies,
            **vision,  # pixel_values, image_grid_thw of every row (top level: the loop moves and saves them)
            "n_accepted": n_acc,
            "n_anchored": len(anchored),
            # nothing to learn: no accepted sample with a non-zero advantage, nothing anchored or replayed, no KL
            "learnable": bool(references) or (p.beta > 0 and n_acc > 0) or any(a[2] != 0 for a in accepted),
            "advantages": torch.tensor([a[2] for a in accepted], device=device),
            "anchor_mask": anchor_mask,
            "replay_mask": replay_mask,
            # the loop's loss contract (training/loop.py): this micro-batch's counts; the loop hands back the
            # step's totals over micro-batches and processes as step_tokens (N_o, N_a, N_p, N_k, replies, |A|, |R|)
            "loss_tokens": {
                "completion": int(completion_mask.sum()),
                "anchor": int(anchor_mask.sum()),
                "replay": int(replay_mask.sum()),
                "kl": int(completion_mask.sum() + anchor_mask.sum() + replay_mask.sum()),
                "reply": n_acc,
                "accepted_group": n_accepted_groups,
                "anchored_group": len(anchored),
            },
            # sharded weights: every process runs these forwards (collectives), with or without accepted rows
            "old_logp": (
                self._logprobs(policy, prompts, replies, vision, n_acc)[:n_acc]
                if self.updates_per_batch > 1 and (n_acc or sharded)
                else None
            ),
            "ref_logp": (
                self._reference_logprobs(policy, prompts, replies, vision, n_acc)[:trained]
                if p.beta > 0 and (trained or sharded)
                else None
            ),
            "rollout_metrics": {  # what the batch's groups were; logged with each of its mu updates
                "groups": float(sampled_groups),
                "rounds": float(rounds),
                "accepted_groups": float(n_accepted_groups),
                "anchored_groups": float(len(anchored)),
                "discarded_groups": float(discarded),
                "replayed_states": float(len(replayed)),
                "acceptance_rate": (sampled_groups - sum(rejections.values())) / groups_seen,
                **{f"rejected_{reason}": count / groups_seen for reason, count in rejections.items()},
                "trained_groups": float(n_accepted_groups + len(anchored)),
                "anchor_share": len(anchored) / groups_seen,
                "pool_states": float(len(self.active_pool())),
                "saturated_states": float(len(self.saturated)),
                "mean_reward": sum(rewards_all) / n_samples,
                "competence": sum(right_all) / n_samples,
                "valid_rate": sum(parsed_all) / n_samples,
                "sampled_actions": float(len(rewards_all)),
                "sampled_actions_total": float(self.sampled_actions),
                "policy_version": float(self.sampler.version),
                "sampling_seconds": sampling_seconds,  # generation (and scoring) of the batch's groups
                "reload_seconds": reload_seconds,  # served: saving and loading the adapter into the server
            },
        }

    def __call__(self, model, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
        p, n_acc, n_anc = self.p, batch["n_accepted"], batch["n_anchored"]
        logits, targets, mask = continuation_logits(
            model, batch["prompts"], batch["replies"], self.pad_id, self._vision(batch), self.image_token_id
        )
        logp = token_logprobs(logits, targets, self._temperatures(logits.shape[0], n_acc, logits.device))
        acc_mask = mask[:n_acc]
        old_logp = batch["old_logp"] if batch["old_logp"] is not None else logp[:n_acc].detach()
        anchor_mask, replay_mask = batch["anchor_mask"], batch["replay_mask"]
        n_rep = replay_mask.shape[0]
        step = batch.get("step_tokens") or batch["loss_tokens"]  # the step's counts (or this batch's alone)
        # rows [accepted; anchored; replayed], then the placeholder row of an empty batch (never trained)
        trained = torch.cat([acc_mask, anchor_mask, replay_mask])
        parts = salvage_ds_loss(
            p,
            logp=logp[:n_acc],
            old_logp=old_logp,
            advantages=batch["advantages"],
            completion_mask=acc_mask,
            n_completion_tokens=round(step["completion"]),
            n_replies=round(step["reply"]),
            anchor_logp=logp[n_acc : n_acc + n_anc],
            anchor_mask=anchor_mask,
            n_anchor_tokens=round(step["anchor"]),
            replay_logp=logp[n_acc + n_anc : n_acc + n_anc + n_rep],
            replay_mask=replay_mask,
            n_replay_tokens=round(step["replay"]),
            ref_logp=batch["ref_logp"],
            ref_mask=trained,
            n_kl_tokens=round(step["kl"]),
            accepted_groups=round(step["accepted_group"]),
            anchored_groups=round(step["anchored_group"]),
        )
        # every parameter in the graph, so DDP finds each one's gradient (zero where no term uses it)
        loss = parts.loss + 0.0 * logp.sum()

        entropy = token_entropy(logits[: trained.shape[0]], p.temperature)[trained.bool()]
        n_tokens = max(1, int(acc_mask.sum()))
        with torch.no_grad():  # CleanRL's approx_kl of pi_theta to pi_old: 0 at a batch's first update
            log_ratio = (logp[:n_acc] - old_logp) * acc_mask
            approx_kl = float(((log_ratio.exp() - 1) - log_ratio).sum()) / n_tokens
        metrics = {
            **batch["rollout_metrics"],
            "surrogate": float(parts.surrogate.detach()),
            "anchor_nll": float(parts.anchor.detach()),
            "replay_nll": float(parts.replay.detach()),
            "kl": float(parts.kl.detach()),
            "clip_fraction": parts.clipped_tokens / n_tokens,
            "approx_kl_old": approx_kl,
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


def train_salvage_ds(
    model,
    processor,
    train_states: list[dict],
    p: SalvageDSParams,
    loop_config,
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
    it."""
    import copy

    from rmsweb_kedro.training.loop import _checkpoints, make_accelerator, train_loop

    prepared = prepare_states(train_states, processor, prompt_config)
    replay = prepare_states(replay_states, processor, prompt_config) if p.eta > 0 and replay_states else []
    # with LoRA the reference is the policy with its adapter disabled; a full-weight policy needs a frozen copy
    full_weights = not hasattr(model, "disable_adapter")
    reference = copy.deepcopy(model).eval().requires_grad_(False) if p.beta > 0 and full_weights else None
    group_log = Path(loop_config.output_dir) / GROUP_LOG
    if not (
        loop_config.resume and _checkpoints(Path(loop_config.output_dir))
    ):  # a fresh run: its records only
        group_log.unlink(missing_ok=True)
    accelerator = accelerator or make_accelerator(loop_config)
    sampler = sampler or SamplerConfig()
    if sampler.kind == "served" and accelerator.distributed_type.name == "DEEPSPEED":
        raise ValueError(
            "sampler.kind 'served' runs with one process, DDP or FSDP2 (launch: ddp or fsdp2), not DeepSpeed: "
            "the served adapter is gathered from FSDP2's shards, which ZeRO-3 does not hold"
        )
    group_sampler = make_sampler(
        sampler, model, processor, prompt_config, p, Path(loop_config.output_dir) / "served", accelerator
    )
    step = SalvageDSStep(
        p,
        processor,
        prompt_config,
        reference,
        loop_config.updates_per_batch,
        pool=prepared,
        group_log=group_log,
        sampler=group_sampler,
        replay_pool=replay,
    )
    # checkpointed with the loop: the sampled actions spent (sampled_action_budget) and the policy version
    accelerator.register_for_checkpointing(step)
    try:
        result = train_loop(
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
        group_sampler.close()  # a managed server stops, its log kept
    return result


class SalvageDSJob(BaseModel):
    """What a launched Salvage-DS run needs besides its data: the ``config`` of the entry point's job."""

    model_config = ConfigDict(extra="forbid")

    algorithm: SalvageDSParams
    loop: LoopConfig
    prompt: PromptConfig
    dev_samples: int = Field(
        0, ge=0, description="sampled replies per dev state at each evaluation (0: greedy)"
    )
    seed: int = 0
    sampler: SamplerConfig = Field(default_factory=SamplerConfig)


def train_job(
    model,
    processor,
    train_states: list[dict],
    config: SalvageDSJob,
    eval_fn=None,
    replay_states: list[dict] | None = None,
):
    """:func:`train_salvage_ds` with the algorithm, loop, prompt and sampler of ``config``: a :class:`SalvageDSJob`,
    or the ``salvage_ds`` node's parameters, which hold its fields (in this process and launched, one call)."""
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


def _main() -> None:
    import polars as pl

    from rmsweb_kedro.training.launch import load_job_model, read_job, save_launched

    job = read_job("Salvage-DS under accelerate launch (see module docstring)")
    config = SalvageDSJob.model_validate(job["config"])
    model, processor = load_job_model(job)  # every field of its checkpoint: attn_implementation, dtype, ...
    dev, train, replay = (
        pl.read_parquet(job[key]).to_dicts() for key in ("dev_path", "train_path", "replay_path")
    )
    result = train_job(model, processor, train, config, dev_eval_fn(dev, config, processor), replay)
    save_launched(result, processor, job["output_dir"])


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    _main()
