"""Hand-computed checks of the Salvage-DS maths (training/salvage_ds/objective.py), a term at a time: rewards,
group statistics, the gate, advantages, clipping, KL, token aggregation and the anchor's action mask."""

from __future__ import annotations

import math

import pytest
import torch

from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.training.salvage_ds.inputs import probe_counts
from rmsweb_kedro.training.salvage_ds.objective import (
    REJECT_REASONS,
    GroupStats,
    Rows,
    SalvageDSParams,
    SampledRows,
    StepCounts,
    action_char_span,
    action_token_mask,
    clipped_surrogate,
    gate,
    group_advantages,
    group_statistics,
    k3_kl,
    partial_credit_reward,
    reward,
    salvage_ds_loss,
    score_group,
)

P = SalvageDSParams()
REFS = [parse_action('type(5, "Paris", submit=true)')]


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        ("type(5, 'paris ', submit=True)", 1.0),  # same meaning, other spelling
        ('type(5, "Paris")', -1.0),  # no submit: does something else
        ('type(6, "Paris", submit=true)', -1.0),
        ("click(5)", -1.0),
        (None, -1.0),  # did not parse
    ],
)
def test_polarized_reward_scores_meaning_without_partial_credit(sample, expected):
    action = parse_action(sample) if sample else None
    assert reward(action, REFS, P) == expected


def test_polarized_reward_uses_each_symbol_and_any_reference():
    p = SalvageDSParams(r_pos=2.0, r_neg=-0.5, r_invalid=-3.0)
    refs = REFS + [parse_action("click(9)")]
    assert reward(parse_action("click(9)"), refs, p) == 2.0
    assert reward(parse_action("click(8)"), refs, p) == -0.5
    assert reward(None, refs, p) == -3.0


def test_a_group_is_scored_once_rewards_and_right_flags():
    # right: matches_any over the reference set, for either reward; partial credit rewards a near miss, never right
    actions = [
        parse_action('type(5, "PARIS", submit=true)'),
        parse_action('type(5, "Rome", submit=true)'),
        None,
    ]
    assert score_group(actions, REFS, P) == ([1.0, -1.0, -1.0], [True, False, False])
    partial = SalvageDSParams(reward="partial")
    rewards, right = score_group(actions, REFS, partial)
    assert rewards == pytest.approx([1.0, 0.6, -1.0]) and right == [True, False, False]


def test_partial_credit_reward_adds_type_target_argument():
    p = SalvageDSParams(reward="partial", w_type=0.2, w_target=0.4, w_argument=0.4)
    assert partial_credit_reward(parse_action("click(5)"), REFS, p) == 0.0
    assert partial_credit_reward(parse_action('type(6, "Paris", submit=true)'), REFS, p) == pytest.approx(0.2)
    assert partial_credit_reward(parse_action('type(5, "Rome", submit=true)'), REFS, p) == pytest.approx(0.6)
    assert reward(parse_action('type(5, "PARIS", submit=true)'), REFS, p) == pytest.approx(1.0)
    assert reward(None, REFS, p) == -1.0


def test_group_statistics_by_hand():
    stats = group_statistics([1.0, -1.0, -1.0, -1.0], [True, False, False, False])
    assert stats.mean == pytest.approx(-0.5)
    assert stats.std == pytest.approx(math.sqrt(0.75))  # population std: sqrt(mean((r - mu)^2))
    assert stats.competence == stats.share_right == 0.25
    with pytest.raises(ValueError, match="one 'right' flag per reward"):
        group_statistics([1.0], [True, False])


@pytest.mark.parametrize(
    ("mode", "std", "competence", "expected"),
    [
        ("salvage_ds", 0.0, 0.0, "all_wrong"),  # no contrast, none right
        ("salvage_ds", 0.0, 1.0, "all_right"),  # no contrast, every sample right
        ("salvage_ds", 0.7, 0.125, "too_hard"),  # 1 of 8 right, under c_low = 0.2
        ("salvage_ds", 0.7, 0.875, "too_easy"),  # 7 of 8 right, over c_high = 0.8
        ("salvage_ds", 1.0, 0.5, None),
        ("salvage_ds", 0.7, 0.2, None),  # the band is closed: c_low itself is accepted
        ("salvage_ds_no_anchor", 0.7, 0.125, "too_hard"),
        ("dapo", 0.0, 0.0, "all_wrong"),
        ("dapo", 0.7, 0.125, None),  # no competence band
        ("grpo", 0.0, 0.0, None),  # no gate at all
    ],
)
def test_gate_decisions(mode, std, competence, expected):
    p = SalvageDSParams(mode=mode, c_low=0.2, c_high=0.8, tau_contrast=0.01)
    assert gate(GroupStats(mean=0.0, std=std, competence=competence, share_right=competence), p) == expected


def test_no_contrast_is_all_right_only_when_every_sample_is_right():
    # the probe's samples move the pooled competence, not whether the group itself was all right
    p = SalvageDSParams()
    assert gate(group_statistics([1.0] * 8, [True] * 8, probe_right=0, probe_samples=4), p) == "all_right"
    assert gate(group_statistics([-1.0] * 8, [False] * 8, probe_right=4, probe_samples=4), p) == "all_wrong"
    # partial credit: equal rewards of 0.6, none right (right type and target, another argument)
    assert (
        gate(group_statistics([0.6] * 8, [False] * 8), p.model_copy(update={"reward": "partial"}))
        == "all_wrong"
    )


@pytest.mark.parametrize(
    ("anchor", "mode", "anchored"),
    [
        ("failing", "salvage_ds", {"all_wrong", "too_hard"}),
        ("all", "salvage_ds", {"all_right", "all_wrong", "too_easy", "too_hard"}),
        ("all", "salvage_ds_no_anchor", set()),
        ("all", "dapo", set()),
    ],
)
def test_the_anchor_rule_names_the_rejected_groups_it_anchors(anchor, mode, anchored):
    p = SalvageDSParams(anchor=anchor, mode=mode)
    assert {reason for reason in REJECT_REASONS if p.anchors(reason)} == anchored


def test_gate_rejects_a_bad_band():
    with pytest.raises(ValueError, match="c_low"):
        SalvageDSParams(c_low=0.9, c_high=0.1)


def test_group_advantages_by_hand():
    rewards = torch.tensor([[1.0, -1.0, -1.0, -1.0], [1.0, 1.0, 1.0, 1.0]])
    scaled = group_advantages(rewards, SalvageDSParams(eps_std=1e-4))
    sigma = math.sqrt(0.75) + 1e-4
    assert scaled[0].tolist() == pytest.approx([1.5 / sigma, -0.5 / sigma, -0.5 / sigma, -0.5 / sigma])
    assert scaled[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # no contrast: no signal, and no division by zero
    centred = group_advantages(rewards, SalvageDSParams(scale_by_std=False))
    assert centred[0].tolist() == [1.5, -0.5, -0.5, -0.5]


def test_clipped_surrogate_by_hand():
    p = SalvageDSParams(eps_low=0.2, eps_high=0.28)
    ratios = torch.tensor([[1.5, 0.5, 0.5, 1.5, 1.1]])
    advantages = torch.tensor([[1.0, 1.0, -1.0, -1.0, 1.0]])
    old = torch.zeros_like(ratios)
    loss, clipped = clipped_surrogate(ratios.log(), old, advantages, p)
    # A > 0: min(rho, clip(rho)) -> 1.28 is the cap; rho below 1 - eps_low is not lifted.
    # A < 0: min(-rho, -clip(rho)) -> the floor 0.8 binds at rho = 0.5; rho = 1.5 is not capped.
    assert loss[0].tolist() == pytest.approx([-1.28, -0.5, 0.8, 1.5, -1.1])
    assert clipped[0].tolist() == [True, False, True, False, False]


def test_clipped_surrogate_has_no_gradient_where_clipped():
    p = SalvageDSParams(eps_low=0.2, eps_high=0.28)
    logp = torch.tensor([math.log(1.5), math.log(1.1)], requires_grad=True)
    loss, _ = clipped_surrogate(logp, torch.zeros(2), torch.tensor([1.0, 1.0]), p)
    loss.sum().backward()
    assert logp.grad.tolist() == pytest.approx([0.0, -1.1])  # d(-rho)/dlogp = -rho where not clipped


def test_k3_kl_by_hand():
    logp = torch.tensor([-1.0, -1.0])
    ref = torch.tensor([-1.0, -1.0 + math.log(2.0)])
    assert k3_kl(logp, ref).tolist() == pytest.approx([0.0, 2.0 - math.log(2.0) - 1.0])


def test_loss_aggregates_tokens_and_weights_terms():
    p = SalvageDSParams(mode="salvage_ds", lam=0.5, beta=0.1, eta=0.25)
    # Two accepted samples, 3 and 1 completion tokens; ratio 1 everywhere, so the surrogate is -A per token.
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    advantages = torch.tensor([1.0, -2.0])
    anchor_logp = torch.tensor([[-1.0, -2.0, -4.0]])
    anchor_mask = torch.tensor([[0, 1, 1]])  # the first token is thought: it does not count
    replay_logp = torch.tensor([[-0.5, -1.5, 0.0]])
    replay_mask = torch.tensor([[1, 1, 0]])  # a whole reference reply of two tokens
    # pi_ref: log 2 above pi_theta on every accepted token (D_k3 = 2 - log 2 - 1), equal on the others (0)
    ref = torch.cat([torch.full((2, 3), math.log(2.0)), anchor_logp, replay_logp])
    ref_mask = torch.cat([mask, anchor_mask, replay_mask])
    parts = salvage_ds_loss(
        p,
        StepCounts(completion=4, anchor=2, replay=2, kl=8, accepted_group=1, anchored_group=1),
        sampled=SampledRows(logp, mask, old_logp=logp, advantages=advantages),
        anchored=Rows(anchor_logp, anchor_mask),
        replayed=Rows(replay_logp, replay_mask),
        reference=Rows(ref, ref_mask),
    )
    assert float(parts.surrogate) == pytest.approx((-1.0 * 3 + 2.0 * 1) / 4)  # token-level: 3 tokens of A=1
    # every trained token: 4 accepted at 1 - log 2 each, 2 anchored and 2 replayed at 0, over N_k = 8
    assert float(parts.kl) == pytest.approx(4 * (1.0 - math.log(2.0)) / 8)
    assert float(parts.anchor) == pytest.approx(3.0)
    assert float(parts.replay) == pytest.approx(1.0)  # (0.5 + 1.5) / 2
    # w_A = w_R = 1/2 (one accepted, one anchored group); eta and beta outside the shares
    expected = 0.5 * -0.25 + 0.5 * 0.5 * 3.0 + 0.25 * 1.0 + 0.1 * 4 * (1.0 - math.log(2.0)) / 8
    assert float(parts.loss) == pytest.approx(expected)
    for mode in ("grpo", "dapo", "salvage_ds_no_anchor"):
        dropped = salvage_ds_loss(
            SalvageDSParams(mode=mode, lam=0.5),
            StepCounts(anchor=2, anchored_group=1),
            anchored=Rows(anchor_logp, anchor_mask),
        )
        assert float(dropped.loss) == 0.0  # only salvage_ds anchors rejected groups


def test_lambda_weighs_an_anchored_group_against_an_accepted_one_whatever_the_mix():
    """Per group, anchor : surrogate = lambda, for 1 anchored + 3 accepted and for 3 anchored + 1 accepted."""
    p = SalvageDSParams(mode="salvage_ds", lam=0.5)

    def loss(accepted: int, anchored: int) -> float:
        # every accepted reply: 2 tokens, ratio 1, advantage -1 -> surrogate +1 per token (mean 1);
        # every anchored reference: 2 action tokens of log-prob -2 -> anchor NLL 2 per token (mean 2)
        logp = torch.zeros(accepted, 2)
        anchor_logp = torch.full((anchored, 2), -2.0)
        return float(
            salvage_ds_loss(
                p,
                StepCounts(
                    completion=2 * accepted,
                    anchor=2 * anchored,
                    accepted_group=accepted,
                    anchored_group=anchored,
                ),
                sampled=SampledRows(
                    logp, torch.ones(accepted, 2), old_logp=logp, advantages=-torch.ones(accepted)
                ),
                anchored=Rows(anchor_logp, torch.ones(anchored, 2)),
            ).loss
        )

    # L = w_A * 1 + lam * w_R * 2: by hand 3/4 * 1 + 0.5 * 1/4 * 2 = 1.0 and 1/4 * 1 + 0.5 * 3/4 * 2 = 1.0
    assert loss(3, 1) == pytest.approx(0.75 + 0.25)
    assert loss(1, 3) == pytest.approx(0.25 + 0.75)
    # per group: the anchor's part over the surrogate's part, divided by |R| / |A|, is lambda in both mixes
    for accepted, anchored in ((3, 1), (1, 3)):
        surrogate_part = accepted / 4 * 1.0
        anchor_part = loss(accepted, anchored) - surrogate_part
        assert (anchor_part / anchored) / (surrogate_part / accepted) == pytest.approx(0.5 * 2.0)


def test_grpo_is_a_per_sequence_mean_with_a_symmetric_clip():
    """TRL's loss_type 'grpo': 1/n sum_i 1/|o_i| sum_t; clip(rho, 1 - eps_low, 1 + eps_low)."""
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    advantages = torch.tensor([1.0, -2.0])
    counts = StepCounts(completion=4, reply=2, accepted_group=1)
    sampled = SampledRows(logp, mask, old_logp=logp, advantages=advantages)
    # reply 1: mean of three -1 = -1; reply 2: +2; per-sequence mean (-1 + 2) / 2 = 0.5 (token mean: -0.25)
    assert float(
        salvage_ds_loss(SalvageDSParams(mode="grpo"), counts, sampled=sampled).loss
    ) == pytest.approx(0.5)
    assert float(
        salvage_ds_loss(SalvageDSParams(mode="dapo"), counts, sampled=sampled).loss
    ) == pytest.approx(-0.25)
    ratio = torch.tensor([[1.5]])
    for mode, cap in (("grpo", 1.2), ("dapo", 1.28)):
        p = SalvageDSParams(mode=mode, eps_low=0.2, eps_high=0.28)
        loss, _ = clipped_surrogate(ratio.log(), torch.zeros(1, 1), torch.ones(1, 1), p)
        assert float(loss) == pytest.approx(-cap)


def test_competence_pools_the_group_with_the_probes_samples():
    # 1 right of 8 in the group, 0 of 4 in the probe: c = 1/12 < 0.15, too hard; the group alone says 1/8 = 0.125
    rewards, right = [1.0] + [-1.0] * 7, [True] + [False] * 7
    p = SalvageDSParams()
    pooled = group_statistics(rewards, right, probe_right=0, probe_samples=4)
    assert pooled.competence == pytest.approx(1 / 12)
    assert gate(pooled, p) == "too_hard"
    # 7 of 8 right and 4 of 4 in the probe: 11/12 > 0.85, too easy
    easy = group_statistics([1.0] * 7 + [-1.0], [True] * 7 + [False], probe_right=4, probe_samples=4)
    assert easy.competence == pytest.approx(11 / 12) and gate(easy, p) == "too_easy"
    # 2 of 8 and 1 of 4: 3/12 = 0.25, inside the band
    assert gate(group_statistics([1.0] * 2 + [-1.0] * 6, [True] * 2 + [False] * 6, 1, 4), p) is None
    with pytest.raises(ValueError, match="probe_right"):
        group_statistics(rewards, right, probe_right=5, probe_samples=4)


def test_probe_counts_rescore_the_probes_samples_against_the_reference_set():
    references = [parse_action("click(4)"), parse_action('press("Enter")')]
    row = {
        "state_id": "s:1",
        "sampled_actions": ["click(4)", "press(Return)", "click(5)", "<invalid: no action>"],
    }
    assert probe_counts(row, references) == (4, 2)
    assert probe_counts({"state_id": "s:2", "sampled_actions": None}, references) == (0, 0)
    with pytest.raises(ValueError, match="state 's:3': field sampled_actions holds 'clack"):
        probe_counts({"state_id": "s:3", "sampled_actions": ["clack(1)"]}, references)


def test_loss_needs_reference_logprobs_when_beta_is_positive():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="ref_logp"):
        salvage_ds_loss(
            SalvageDSParams(beta=0.1),
            StepCounts(completion=2, kl=2, accepted_group=1),
            sampled=SampledRows(x, torch.ones(1, 2), old_logp=x, advantages=torch.ones(1)),
        )


def test_action_mask_with_hand_written_offsets():
    reply = 'Thought: box [5]\nAction: type(5, "Paris")'
    assert action_char_span(reply) == (25, 41)
    assert reply[25:41] == 'type(5, "Paris")'
    # tokens: "Thought" ":" " box [5]" "]\nAc" (straddles thought and 'Action') "tion:" " type" '(5, "Paris")'
    offsets = [(0, 7), (7, 8), (8, 15), (15, 19), (19, 24), (24, 29), (29, 41), (0, 0)]
    assert action_token_mask(offsets, reply) == [0, 0, 0, 0, 0, 1, 1, 0]
    # one token spans the end of the thought and the start of the call
    straddling = [(0, 8), (8, 26), (26, 41)]
    assert action_token_mask(straddling, reply) == [0, 0, 1]


def test_action_mask_with_a_real_tokenizer(tiny_lm):
    _, tokenizer = tiny_lm
    reply = 'Thought: the search box is [5]\nAction: type(5, "Paris")'
    encoded = tokenizer(reply, return_offsets_mapping=True, add_special_tokens=False)
    mask = action_token_mask(encoded["offset_mapping"], reply)
    action_ids = [i for i, m in zip(encoded["input_ids"], mask, strict=True) if m]
    other_ids = [i for i, m in zip(encoded["input_ids"], mask, strict=True) if not m]
    assert tokenizer.decode(action_ids).strip() == 'type(5, "Paris")'
    assert "search box" in tokenizer.decode(other_ids)


def test_action_mask_rejects_replies_without_one_action():
    with pytest.raises(ValueError, match="exactly one 'Action:' line, found 0"):
        action_char_span("Thought: nothing to do")
    with pytest.raises(ValueError, match="found 2"):
        action_char_span("Action: click(1)\nAction: click(2)")


@pytest.mark.parametrize(
    ("reply", "call"),
    [
        ("Action: click(3)", "click(3)"),  # no thought
        ("  thought :  box\nACTION :  click(3)", "click(3)"),  # any case, blanks around the names
        ("Thought: first\nsecond line\nAction: click(3)", "click(3)"),  # a thought over two lines
        (
            'Thought: the "Action: x" button\nAction: click(3)',
            "click(3)",
        ),  # 'Action:' inside the thought's line
    ],
)
def test_the_anchor_reads_the_reply_grammar(reply, call):
    start, end = action_char_span(reply)
    assert reply[start:end] == call
    # one token a character: exactly the call's characters are the action, nothing of the thought
    mask = action_token_mask([(i, i + 1) for i in range(len(reply))], reply)
    assert "".join(c for c, m in zip(reply, mask, strict=True) if m) == call


def test_the_anchor_masks_the_action_of_every_fixture_reference_reply(tiny_checkpoint, tiny_states):
    """Real reference replies ('Thought: ...\\nAction: call' and 'Action: call') with the fixture checkpoint's
    tokenizer: the masked tokens are the action call, and none of them touches the thought's line."""
    from transformers import AutoTokenizer

    from rmsweb_kedro.contracts.actions import format_action
    from rmsweb_kedro.contracts.prompts import PromptConfig, reference_reply

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    for config in (PromptConfig(include_thought=True), PromptConfig(include_thought=False)):
        for state in tiny_states:
            reply = reference_reply(state, config)
            encoded = tokenizer(reply, add_special_tokens=False, return_offsets_mapping=True)
            mask = action_token_mask(encoded["offset_mapping"], reply)
            action = [i for i, m in zip(encoded["input_ids"], mask, strict=True) if m]
            assert tokenizer.decode(action).strip() == format_action(parse_action(state["reference_action"]))
            action_line = reply.rindex("Action:")
            assert all(
                a >= action_line for (a, _), m in zip(encoded["offset_mapping"], mask, strict=True) if m
            )
