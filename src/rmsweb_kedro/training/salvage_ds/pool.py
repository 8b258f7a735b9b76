"""The pool a Salvage-DS run draws its groups' states from, and what drawing has spent.

**Dynamic sampling** (DAPO's, Yu et al. 2025, sec. 3.2; verl's ``max_num_gen_batches``): a batch is filled with
*accepted* groups. A step samples groups for B states (B = ``loop.batch_size``: the loop's batch, :meth:`GroupPool.
first_round`) and, while it holds fewer than B accepted groups, samples another round of B states drawn from the
pool (states not yet drawn in this batch, :meth:`GroupPool.next_round`) until B are accepted or ``max_rounds``
rounds are spent. Under several processes each fills its share of B, resampling from its own shard of the pool
(``states[rank::world]``, as a distributed sampler shards a data set: every process draws with the same seeded RNG,
so without shards they would resample the same states). A state whose groups were all right in
``saturation_draws`` consecutive draws has been learnt: it **leaves the pool** (:meth:`GroupPool.record`).
``sampled_action_budget`` caps the sampled actions of a run (:meth:`GroupPool.spend`: every round's, resampled
rounds included; each process counts its own, as ``loop.batch_size`` is per process), so modes are compared at
equal sampling cost. A batch that finds the budget spent, or no state left to draw, ends the run
(:meth:`GroupPool.exhausted`; the step hands the loop a ``StoppedBatch``).

Every draw takes the torch global RNG (``torch.randperm``), which the loop seeds and checkpoints: a resumed run draws
what the interrupted one would have.
"""

from __future__ import annotations

import torch

from rmsweb_kedro.training.salvage_ds.objective import SalvageDSParams
from rmsweb_kedro.training.sampling import PreparedState


def draw(states: list[PreparedState], count: int) -> list[PreparedState]:
    """``count`` of ``states`` (all when fewer), drawn without replacement with the global RNG."""
    order = torch.randperm(len(states))[:count].tolist()
    return [states[i] for i in order]


class GroupPool:
    """The training states of a run and its bookkeeping: the states drawn in the current batch, each state's run of
    all-right draws (``streaks``), the states that left the pool (``saturated``) and the sampled actions spent.

    ``rank``/``world``: this process and the number of processes; further rounds draw from ``states[rank::world]``.
    Each process keeps its own bookkeeping (its draws are its own), checkpointed with the step
    (:meth:`state_dict`)."""

    def __init__(self, states: list[PreparedState], p: SalvageDSParams, rank: int = 0, world: int = 1):
        self.states = states
        self.p = p
        self.rank, self.world = rank, world
        self.sampled_actions = 0  # spent so far in the run (sampled_action_budget)
        self.streaks: dict[str, int] = {}  # state id -> its latest draws all right in a row
        self.saturated: set[str] = set()  # states that left the pool (saturation_draws all-right draws)
        self.drawn: set[str] = set()  # the states drawn in the current batch

    # ---------------------------------------------------------------- drawing

    def active(self) -> list[PreparedState]:
        """The pool's states that have not saturated."""
        return [s for s in self.states if s.state_id not in self.saturated]

    def first_round(self, states: list[PreparedState], wanted: int) -> list[PreparedState]:
        """A batch's first round: the loop's ``states``, saturated ones replaced by active states of this process's
        shard (none when nothing is left to draw: :meth:`exhausted`); starts the batch's record of drawn states."""
        kept = [s for s in states if s.state_id not in self.saturated]
        if len(kept) < wanted:
            kept += self._unseen(wanted - len(kept), {s.state_id for s in kept})
        self.drawn = {s.state_id for s in kept}
        return kept

    def next_round(self, wanted: int) -> list[PreparedState]:
        """``wanted`` further states (fewer when the shard runs out): active states of this process's shard not
        drawn in this batch yet."""
        return self._mark(self._unseen(wanted, self.drawn))

    def keep_generating(self, states: list[PreparedState], wanted: int) -> list[PreparedState]:
        """``states``, or, when this process has nothing left to draw for a further round that sharded weights make
        it join (generate is a collective then), ``wanted`` states re-drawn from the whole pool (saturated ones
        too)."""
        return states or self._mark(draw(self.states, wanted))

    def _unseen(self, count: int, drawn: set[str]) -> list[PreparedState]:
        """``count`` states of this process's shard, neither saturated nor in ``drawn``."""
        excluded = self.saturated | drawn
        return draw([s for s in self.states[self.rank :: self.world] if s.state_id not in excluded], count)

    def _mark(self, states: list[PreparedState]) -> list[PreparedState]:
        self.drawn |= {s.state_id for s in states}
        return states

    # ---------------------------------------------------------------- saturation and the budget

    def record(self, state: PreparedState, all_right: bool) -> None:
        """Count the state's runs of all-right groups; ``saturation_draws`` in a row take it out of the pool."""
        self.streaks[state.state_id] = self.streaks.get(state.state_id, 0) + 1 if all_right else 0
        if self.p.saturation_draws is not None and self.streaks[state.state_id] >= self.p.saturation_draws:
            self.saturated.add(state.state_id)

    def spend(self, actions: int) -> None:
        """Count ``actions`` sampled actions against the run's budget."""
        self.sampled_actions += actions

    def budget_left(self) -> bool:
        budget = self.p.sampled_action_budget
        return budget is None or self.sampled_actions < budget

    def exhausted(self, first_round: list[PreparedState]) -> str | None:
        """Why this process can sample no further batch, ``first_round`` being the batch's (:meth:`first_round`):
        its budget is spent, or no state is left to draw; None when it can."""
        if not self.budget_left():
            return (
                f"sampled_action_budget spent ({self.sampled_actions} of {self.p.sampled_action_budget} sampled "
                "actions)"
            )
        if not first_round:
            return f"pool empty ({len(self.saturated)} of {len(self.states)} states saturated)"
        return None

    # ---------------------------------------------------------------- checkpoint

    def state_dict(self) -> dict:
        """The run's bookkeeping under the keys of the step's checkpoints (``SalvageDSStep.state_dict``)."""
        return {
            "sampled_actions": self.sampled_actions,
            "streaks": dict(self.streaks),
            "saturated": sorted(self.saturated),
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume the bookkeeping of ``state`` (a step checkpoint's dict; ``streaks`` and ``saturated`` are absent
        in checkpoints written before saturation)."""
        self.sampled_actions = int(state["sampled_actions"])
        self.streaks = {k: int(v) for k, v in state.get("streaks", {}).items()}
        self.saturated = set(state.get("saturated", []))
