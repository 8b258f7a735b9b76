"""The pool a run draws its groups from (training/salvage_ds/pool.py), without a model: draws leave out saturated
states and states already drawn in the batch, each process draws from its own shard, the budget counts sampled
actions, and the bookkeeping round-trips under the keys every step checkpoint has held."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.training.salvage_ds.objective import SalvageDSParams
from rmsweb_kedro.training.salvage_ds.pool import GroupPool
from rmsweb_kedro.training.salvage_ds.step import SalvageDSStep
from rmsweb_kedro.training.sampling import PreparedState

#: SalvageDSStep.state_dict's keys, in the order of every checkpoint written so far (custom_checkpoint_<n>.pkl)
STEP_KEYS = ["sampled_actions", "batches", "policy_version", "streaks", "saturated"]
#: what SalvageDSStep reads of a processor when it samples nothing itself
PROCESSOR = SimpleNamespace(
    image_token="<img>", tokenizer=SimpleNamespace(pad_token_id=0, convert_tokens_to_ids=len)
)


def Sampler(version: int = 0) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(version=version, reload_seconds=0.0)


def prepared(n: int, prefix: str = "s") -> list[PreparedState]:
    return [
        PreparedState(f"{prefix}:{i}", {}, [parse_action("click(1)")], [1, 2], [3, 4], [0, 1])
        for i in range(n)
    ]


def ids(states: list[PreparedState]) -> list[str]:
    return [s.state_id for s in states]


def test_a_round_draws_neither_saturated_states_nor_states_drawn_in_the_batch():
    states = prepared(8)
    pool = GroupPool(states, SalvageDSParams(saturation_draws=2))
    for _ in range(2):  # two all-right draws in a row: s:0 leaves the pool
        pool.record(states[0], all_right=True)
    pool.record(states[1], all_right=True)
    pool.record(states[1], all_right=False)  # a wrong draw restarts the streak
    assert pool.saturated == {"s:0"} and pool.streaks == {"s:0": 2, "s:1": 0}
    assert ids(pool.active()) == ids(states[1:])
    torch.manual_seed(0)
    first = pool.first_round([states[0], states[2]], wanted=2)
    assert (
        "s:0" not in ids(first) and "s:2" in ids(first) and len(first) == 2
    )  # s:0 replaced by an active state
    second = pool.next_round(wanted=3)
    third = pool.next_round(wanted=3)
    drawn = ids(first) + ids(second) + ids(third)
    assert len(drawn) == len(set(drawn)) == 7  # 7 active states, none drawn twice in the batch
    assert pool.next_round(wanted=3) == []  # the shard is spent
    pool.first_round([states[3]], wanted=1)  # a new batch forgets the last one's draws
    assert pool.drawn == {"s:3"}


def test_each_process_draws_further_rounds_from_its_own_shard():
    states = prepared(6)
    for rank in (0, 1):
        pool = GroupPool(states, SalvageDSParams(), rank=rank, world=2)
        pool.first_round([], wanted=0)
        assert sorted(ids(pool.next_round(wanted=6))) == ids(states[rank::2])


def test_a_process_with_nothing_left_keeps_generating_when_the_weights_are_sharded():
    states = prepared(4)
    pool = GroupPool(states, SalvageDSParams(), rank=1, world=2)
    pool.saturated = {"s:1", "s:3"}  # this process's whole shard
    first = pool.first_round([], wanted=2)
    assert first == [] and pool.exhausted(first) == "pool empty (2 of 4 states saturated)"
    pool.first_round([states[0]], wanted=1)
    assert pool.next_round(wanted=2) == []
    # a further round that sharded weights make it join (generate is a collective): it redraws from the whole pool
    # (saturated states too)
    again = pool.keep_generating([], wanted=2)
    assert len(again) == 2 and set(ids(again)) <= set(ids(states))


def test_the_budget_counts_sampled_actions():
    pool = GroupPool(prepared(2), SalvageDSParams(sampled_action_budget=20))
    first = pool.first_round([], wanted=2)
    pool.spend(16)
    assert pool.budget_left() and pool.exhausted(first) is None
    pool.spend(16)  # a round may overshoot; the next one does not start
    assert not pool.budget_left() and pool.sampled_actions == 32
    assert pool.exhausted(first) == "sampled_action_budget spent (32 of 20 sampled actions)"
    assert GroupPool([], SalvageDSParams()).budget_left()  # no budget: no cap


def test_the_bookkeeping_round_trips_under_the_old_checkpoint_keys():
    p = SalvageDSParams()
    pool = GroupPool(prepared(3), p)
    pool.spend(24)
    pool.streaks, pool.saturated = {"s:0": 2, "s:1": 1}, {"s:0"}
    step = SalvageDSStep(p, PROCESSOR, None, pool=pool, sampler=Sampler(version=7))
    step.batches = 3
    state = step.state_dict()
    assert list(state) == STEP_KEYS
    assert state == {"sampled_actions": 24, "batches": 3, "policy_version": 7, "streaks": {"s:0": 2, "s:1": 1},
                     "saturated": ["s:0"]}  # fmt: skip
    resumed = SalvageDSStep(p, PROCESSOR, None, pool=GroupPool(prepared(3), p), sampler=Sampler())
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    # a checkpoint from before saturation and the group log: only the sampled actions
    old = SalvageDSStep(p, PROCESSOR, None, pool=GroupPool(prepared(3), p), sampler=Sampler())
    old.load_state_dict({"sampled_actions": 8})
    assert old.state_dict() == {"sampled_actions": 8, "batches": 0, "policy_version": 0, "streaks": {},
                                "saturated": []}  # fmt: skip
