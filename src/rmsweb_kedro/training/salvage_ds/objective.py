r"""Salvage-DS's objective: group-relative RL at the level of one action, with a gate and an action-only anchor.

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

The modes (``mode``), each what its name says and one row of :data:`MODES`, which every term reads:

    grpo                  DeepSeekMath's GRPO as TRL implements it (loss_type "grpo"): every group, per-sequence
                          mean (1/G \sum_i 1/|o_i| \sum_t) instead of the token mean, symmetric clip
                          (\epsilon_high = \epsilon_low), no dynamic sampling, no anchor
    dapo                  DAPO: token mean, clip-higher (\epsilon_high), dynamic sampling over the contrast filter
                          (\sigma_g > \tau_contrast), rejected groups discarded
    salvage_ds            the full gate, dynamic sampling, the rejected groups ``anchor`` names anchored, weight
                          \lambda
    salvage_ds_no_anchor  the full gate, dynamic sampling, rejected groups discarded

Every symbol is a field of :class:`SalvageDSParams` (``conf/base/parameters_salvage_ds.yml``), except
:math:`\mu` and B, fields of the shared loop's ``LoopConfig``. The partial-credit reward (type / target / argument
weighted, the usual GUI-RL design) is kept as an ablation: ``reward: partial``.

Read top to bottom, as the paper: the modes, the symbols, rewards, the gate, advantages, the per-token terms, L,
and the anchor's token mask. Where a batch's groups come from and how it is filled (dynamic sampling): ``pool.py``
and ``step.py``; the run (dev evaluation, several processes): ``run.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rmsweb_kedro.contracts.actions import (
    Action,
    matches_any,
    normalized_argument,
    polarized_reward,
    reply_spans,
    same_target,
)

Mode = Literal["grpo", "dapo", "salvage_ds", "salvage_ds_no_anchor"]
RejectReason = Literal["all_right", "all_wrong", "too_easy", "too_hard"]
REJECT_REASONS: tuple[RejectReason, ...] = ("all_right", "all_wrong", "too_easy", "too_hard")
#: The rejected groups each ``anchor`` rule anchors: ``failing``, the groups the policy fails (below the band or
#: never right); ``all``, every rejected group (a state already solved is anchored too: SFT on what it knows).
ANCHORED_REASONS: dict[str, frozenset[str]] = {
    "failing": frozenset({"all_wrong", "too_hard"}),
    "all": frozenset(REJECT_REASONS),
}


# ---------------------------------------------------------------- the modes


@dataclass(frozen=True)
class ModeSpec:
    """What a mode turns on: one row of :data:`MODES`. The defaults are the full method (``salvage_ds``); a row
    names what its mode does otherwise."""

    sequence_mean: bool = False
    """The surrogate averages each reply's tokens, then the replies (1/n \\sum_i 1/|o_i| \\sum_t); False: every
    accepted token weighs the same (1/N_o)."""
    symmetric_clip: bool = False
    """The ratio is clipped at 1 + epsilon_low above as below; False: clip-higher, 1 + epsilon_high."""
    contrast_filter: bool = True
    """The gate rejects a group without contrast (sigma_g <= tau_contrast): ``all_right``, ``all_wrong``."""
    competence_band: bool = True
    """The gate also rejects a contrasting group whose competence lies outside [c_low, c_high]: ``too_hard``,
    ``too_easy``."""
    dynamic_sampling: bool = True
    """A batch samples further rounds of states until it holds B accepted groups (``max_rounds`` at most)."""
    anchors: bool = True
    """The rejected groups the ``anchor`` rule names get the action-only anchor, weighted lambda."""


MODES: Mapping[Mode, ModeSpec] = MappingProxyType({
    # DeepSeekMath's GRPO as TRL implements it: every group, per-sequence mean, symmetric clip
    "grpo": ModeSpec(sequence_mean=True, symmetric_clip=True, contrast_filter=False, competence_band=False,
                     dynamic_sampling=False, anchors=False),
    # DAPO: token mean, clip-higher, dynamic sampling over the contrast filter, rejected groups discarded
    "dapo": ModeSpec(competence_band=False, anchors=False),
    # the full gate, dynamic sampling, the rejected groups ``anchor`` names anchored
    "salvage_ds": ModeSpec(),
    # the full gate, dynamic sampling, rejected groups discarded
    "salvage_ds_no_anchor": ModeSpec(anchors=False),
})  # fmt: skip


# ---------------------------------------------------------------- the symbols


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
    # sampled actions of the whole run (each process's, every round's; spent: the run ends); None: no cap.
    # Sized by max_rounds: batches x batch_size x G x max_rounds (SalvageDSJob refuses less than one round a batch)
    sampled_action_budget: int | None = Field(None, ge=1)
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
    # every dropout of the policy (LoRA's lora_dropout included) off for the whole run, as verl and TRL do for RL:
    # the groups are sampled in eval mode, so pi_old, pi_ref and pi_theta must be that same deterministic policy
    # (rho is then exactly 1 at a batch's first update); False keeps the checkpoint's dropout in the updates
    disable_dropout: bool = True

    @model_validator(mode="after")
    def _band(self) -> SalvageDSParams:
        if self.c_low > self.c_high:
            raise ValueError(f"c_low ({self.c_low}) must not exceed c_high ({self.c_high})")
        return self

    @property
    def spec(self) -> ModeSpec:
        """The mode's row of :data:`MODES`."""
        return MODES[self.mode]

    @property
    def anchor_weight(self) -> float:
        """lambda as the mode uses it: 0 in a mode that anchors nothing."""
        return self.lam if self.spec.anchors else 0.0

    def anchors(self, reason: RejectReason) -> bool:
        """Whether a group rejected for ``reason`` gets the anchor (the mode anchors, and ``anchor`` names it)."""
        return self.anchor_weight > 0 and reason in ANCHORED_REASONS[self.anchor]

    @property
    def clip_high(self) -> float:
        """The upper clip epsilon: eps_low where the mode clips symmetrically, clip-higher eps_high otherwise."""
        return self.eps_low if self.spec.symmetric_clip else self.eps_high


# ---------------------------------------------------------------- rewards


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
    """r_{g,i} as ``p.reward`` names it: ``contracts.actions.polarized_reward`` with r_pos, r_neg and r_invalid
    (the project's one answer to "is this sampled action right"), or the partial-credit ablation."""
    if p.reward == "polarized":
        return polarized_reward(action, references, p.r_pos, p.r_neg, p.r_invalid)
    return partial_credit_reward(action, references, p)


def score_group(
    actions: Sequence[Action | None], references: list[Action], p: SalvageDSParams
) -> tuple[list[float], list[bool]]:
    """``(rewards, right)`` of a group's G sampled actions (None: did not parse): r_{g,i}, and whether each is
    right (``matches_any``), the flags the competence, the saturation and the group log count."""
    right = [matches_any(action, references) for action in actions]
    return [reward(action, references, p) for action in actions], right


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
    # float64, unlike group_advantages: the gate compares sigma_g with tau_contrast, and equal rewards that are not
    # binary fractions (partial credit's 0.6, eight times) leave sigma = 6e-8 in float32 but 0 in float64, so a
    # small tau_contrast (>= 0 is allowed) still tells no contrast from contrast
    r = torch.tensor(rewards, dtype=torch.float64)
    competence = (sum(right) + probe_right) / (len(right) + probe_samples)
    return GroupStats(float(r.mean()), float(r.std(correction=0)), competence, sum(right) / len(right))


def gate(stats: GroupStats, p: SalvageDSParams) -> RejectReason | None:
    """None when the group is accepted for the clipped objective, else why it is rejected (the mode's filters)."""
    spec = p.spec
    if not spec.contrast_filter:
        return None
    if stats.std <= p.tau_contrast:  # no contrast: all right, or not (none right; rewards that cannot tell)
        return "all_right" if stats.share_right == 1.0 else "all_wrong"
    if not spec.competence_band:
        return None
    if stats.competence < p.c_low:
        return "too_hard"
    if stats.competence > p.c_high:
        return "too_easy"
    return None


def group_advantages(rewards: torch.Tensor, p: SalvageDSParams) -> torch.Tensor:
    """A_hat of the samples of one or more groups: ``rewards`` is (groups, G), the result has the same shape.

    mu_g and sigma_g again, in the rewards' dtype (float32 from the rollout, as the surrogate's tensors), not the
    gate's float64 GroupStats: the same numbers to ~1e-7, but the advantages every run so far trained on."""
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


# ---------------------------------------------------------------- L


@dataclass(frozen=True)
class StepCounts:
    """The counts of one optimizer step, over every micro-batch and process, that divide and weigh L's terms.
    The names are the rollout's ``loss_tokens`` (the loop sums them into ``step_tokens`` and logs
    ``train/<name>_tokens``)."""

    completion: int = 0  # N_o: completion tokens of accepted samples
    anchor: int = 0  # N_a: anchored action tokens
    replay: int = 0  # N_p: replayed reference tokens
    kl: int = 0  # N_k = N_o + N_a + N_p: every trained token
    reply: int = 0  # accepted replies: the divisor of grpo's per-sequence mean
    accepted_group: int = 0  # |A|
    anchored_group: int = 0  # |R|

    @classmethod
    def of(cls, tokens: Mapping[str, float]) -> StepCounts:
        """The counts of the loop's ``step_tokens`` (sums over processes, as floats)."""
        return cls(**{name: round(tokens[name]) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Rows:
    """Rows of one term: ``logp`` (B, T) log-probabilities of their tokens, ``mask`` (B, T) the tokens the term
    counts (1) and padding or masked-out tokens (0)."""

    logp: torch.Tensor
    mask: torch.Tensor


@dataclass(frozen=True)
class SampledRows(Rows):
    """The accepted samples' rows: besides log pi_theta and the completion mask, ``old_logp`` (B, T) log pi_old and
    ``advantages`` (B,) A_hat of each sample."""

    old_logp: torch.Tensor
    advantages: torch.Tensor


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


def surrogate_mean(rows: SampledRows, n: StepCounts, p: SalvageDSParams) -> tuple[torch.Tensor, int]:
    """The clipped surrogate's mean over the step's accepted tokens (1/N_o), or, in a mode with the per-sequence
    mean, over each reply's tokens and then the step's replies; and how many of these tokens the clip held."""
    mask = rows.mask.to(rows.logp.dtype)
    if p.spec.sequence_mean:  # each reply's tokens averaged, then the replies: 1/n sum_i 1/|o_i| sum_t
        if n.reply <= 0:
            raise ValueError("grpo's per-sequence mean needs n_replies > 0 when there are completion tokens")
        weights = mask / mask.sum(-1, keepdim=True).clamp(min=1) / n.reply
    else:
        weights = mask / n.completion
    per_token, clipped = clipped_surrogate(rows.logp, rows.old_logp, rows.advantages.unsqueeze(-1), p)
    return (per_token * weights).sum(), int((clipped & rows.mask.bool()).sum())


def token_nll(rows: Rows, n_tokens: int) -> torch.Tensor:
    """-log pi_theta summed over the rows' counted tokens, over the step's ``n_tokens`` (the anchor's N_a, the
    replay's N_p)."""
    return -(rows.logp * rows.mask.to(rows.logp.dtype)).sum() / n_tokens


def kl_mean(trained: Sequence[Rows | None], reference: Rows, n_kl_tokens: int) -> torch.Tensor:
    """D_k3 over every trained token (1/N_k): ``trained`` the term rows [accepted; anchored; replayed] of
    pi_theta, ``reference`` log pi_ref of the same rows stacked, padded to one width, with their mask."""
    rows = [r.logp for r in trained if r is not None and r.logp.shape[0]]
    width = reference.logp.shape[-1]
    theta = torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[-1])) for t in rows])
    return (k3_kl(theta, reference.logp) * reference.mask.to(theta.dtype)).sum() / n_kl_tokens


def salvage_ds_loss(
    p: SalvageDSParams,
    counts: StepCounts,
    *,
    sampled: SampledRows | None = None,
    anchored: Rows | None = None,
    replayed: Rows | None = None,
    reference: Rows | None = None,
) -> LossParts:
    """L (module docstring) for the accepted samples (``sampled``: (B, T)), the anchored references (``anchored``:
    (B', T'), the mask on their action tokens) and the replayed SFT states (``replayed``: (B'', T''), whole
    replies). The KL term takes every trained row at once: ``reference`` holds log pi_ref of the rows
    ``[accepted; anchored; replayed]`` stacked, padded to one width, and their mask, aligned with the same rows of
    pi_theta. ``counts`` are the whole optimizer step's (N_o, N_a, N_p, N_k, replies, |A|, |R|)."""
    zero = torch.zeros(())
    surrogate, kl, anchor, replay, clipped_tokens = zero, zero, zero, zero, 0
    if counts.completion > 0 and counts.accepted_group <= 0:
        raise ValueError("completion tokens need accepted_groups > 0 (the share w_A weighs the surrogate)")
    if counts.anchor > 0 and p.anchor_weight > 0 and counts.anchored_group <= 0:
        raise ValueError("anchor tokens need anchored_groups > 0 (the share w_R weighs the anchor)")
    groups = counts.accepted_group + counts.anchored_group
    w_accepted = counts.accepted_group / groups if groups else 0.0
    w_anchored = counts.anchored_group / groups if groups else 0.0
    if sampled is not None and counts.completion > 0:
        surrogate, clipped_tokens = surrogate_mean(sampled, counts, p)
    if anchored is not None and counts.anchor > 0 and p.anchor_weight > 0:
        anchor = token_nll(anchored, counts.anchor)
    if replayed is not None and counts.replay > 0 and p.eta > 0:
        replay = token_nll(replayed, counts.replay)
    if p.beta > 0 and counts.kl > 0:
        if reference is None:
            raise ValueError("beta > 0 needs the reference log-probabilities (ref_logp) of every trained row")
        kl = kl_mean((sampled, anchored, replayed), reference, counts.kl)
    loss = w_accepted * surrogate + p.anchor_weight * w_anchored * anchor + p.eta * replay + p.beta * kl
    return LossParts(
        loss=loss, surrogate=surrogate, kl=kl, anchor=anchor, replay=replay, clipped_tokens=clipped_tokens
    )


# ---------------------------------------------------------------- the anchor's token mask


def action_char_span(reply: str) -> tuple[int, int]:
    """[start, end) of the action call inside an assistant reply (``format_reply``: 'Thought: ...\\nAction: call'),
    as the reply grammar (``contracts.actions.reply_spans``) reads it."""
    calls = reply_spans(reply).calls
    if len(calls) != 1:
        raise ValueError(
            f"the reference reply must hold exactly one 'Action:' line, found {len(calls)}: {reply!r}"
        )
    return calls[0]


def action_token_mask(offsets: list[tuple[int, int]], reply: str) -> list[int]:
    """1 for the reply tokens that belong to the action call, 0 for all others (the thought, 'Action:', ...).

    ``offsets`` are the tokenizer's character offsets of the reply's tokens (``return_offsets_mapping``). A token
    is in the action when it overlaps the action's span and overlaps no character of the thought, so a token that
    straddles both (possible with byte-level BPE) is left out and no gradient reaches the thought."""
    start, end = action_char_span(reply)
    t_start, t_end = reply_spans(reply).thought or (0, 0)

    def overlaps(a: int, b: int, lo: int, hi: int) -> bool:
        return a < hi and lo < b

    return [int(overlaps(a, b, start, end) and not overlaps(a, b, t_start, t_end)) for a, b in offsets]
