"""The table of modes (``objective.MODES``) walked: every mode has its row, the table cannot be changed, and each
field of every row does what it says on a tiny case: the surrogate's mean and clip, the gate's two filters, and,
through a rollout whose groups a scripted sampler writes (no model), dynamic sampling and the anchor."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, fields
from types import SimpleNamespace
from typing import get_args

import pytest
import torch

from rmsweb_kedro.agents.base import PolicySample
from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.contracts.prompts import PromptConfig
from rmsweb_kedro.training.salvage_ds.objective import (
    MODES,
    Mode,
    ModeSpec,
    SalvageDSParams,
    SampledRows,
    StepCounts,
    clipped_surrogate,
    gate,
    group_statistics,
    salvage_ds_loss,
)
from rmsweb_kedro.training.salvage_ds.pool import GroupPool
from rmsweb_kedro.training.salvage_ds.step import SalvageDSStep
from rmsweb_kedro.training.sampling import PreparedState
from tests.salvage_ds.conftest import make_states

PROCESSOR = SimpleNamespace(
    image_token="<img>", tokenizer=SimpleNamespace(pad_token_id=0, convert_tokens_to_ids=len)
)
#: what each state's group samples: "hopeless" states never right (no contrast), "mixed" ones 4 of 8 right
SCRIPT = {"hopeless": ["click(9)"] * 8, "mixed": ["click(1)"] * 4 + ["click(9)"] * 4}


class ScriptedSampler:
    """A GroupSampler whose replies SCRIPT writes, by the state id's prefix."""

    version, reload_seconds = 1, 0.0

    def sample(self, policy, states: list[PreparedState], n: int, greedy: bool = False):
        return [
            [
                PolicySample(
                    text=t,
                    thought=None,
                    action=parse_action(t),
                    error=None,
                    prompt_ids=s.prompt_ids,
                    completion_ids=[3, 4],
                )
                for t in SCRIPT[s.state_id.split(":")[0]][:n]
            ]  # fmt: skip
            for s in states
        ]

    def close(self) -> None:
        pass


def prepared(kind: str, rows: list[dict]) -> list[PreparedState]:
    """States whose reference is click(1), their rows the toy shop's (no screenshot)."""
    return [
        PreparedState(f"{kind}:{i}", row, [parse_action("click(1)")], [5, 6], [7, 8, 2], [0, 1, 1])
        for i, row in enumerate(rows)
    ]


def test_every_mode_has_one_row_and_the_table_is_frozen():
    assert set(MODES) == set(get_args(Mode))
    for mode in MODES:
        assert SalvageDSParams(mode=mode).spec is MODES[mode]
    with pytest.raises(TypeError):
        MODES["grpo"] = MODES["dapo"]  # type: ignore[index]
    with pytest.raises(FrozenInstanceError):
        MODES["grpo"].anchors = True  # type: ignore[misc]
    # the rows differ: no two modes are one
    assert len({tuple(getattr(spec, f.name) for f in fields(ModeSpec)) for spec in MODES.values()}) == len(
        MODES
    )


@pytest.mark.parametrize("mode", list(MODES))
def test_the_loss_reads_sequence_mean_and_symmetric_clip(mode):
    spec, p = MODES[mode], SalvageDSParams(mode=mode, eps_low=0.2, eps_high=0.28)
    # two accepted replies of 3 and 1 tokens, A = 1 and -2, ratio 1: per-sequence mean (-1 + 2) / 2 = 0.5, token
    # mean (-3 + 2) / 4 = -0.25
    logp, mask = torch.zeros(2, 3), torch.tensor([[1, 1, 1], [1, 0, 0]])
    sampled = SampledRows(logp, mask, old_logp=logp, advantages=torch.tensor([1.0, -2.0]))
    loss = salvage_ds_loss(p, StepCounts(completion=4, reply=2, accepted_group=1), sampled=sampled).loss
    assert float(loss) == pytest.approx(0.5 if spec.sequence_mean else -0.25)
    # rho = 1.5, A = 1: capped at 1 + eps_low = 1.2 when symmetric, 1 + eps_high = 1.28 otherwise
    per_token, _ = clipped_surrogate(torch.tensor([[1.5]]).log(), torch.zeros(1, 1), torch.ones(1, 1), p)
    assert float(per_token) == pytest.approx(-1.2 if spec.symmetric_clip else -1.28)


@pytest.mark.parametrize("mode", list(MODES))
def test_the_gate_reads_contrast_filter_and_competence_band(mode):
    spec, p = MODES[mode], SalvageDSParams(mode=mode, c_low=0.2, c_high=0.8)
    no_contrast = group_statistics([-1.0] * 8, [False] * 8)
    assert gate(no_contrast, p) == ("all_wrong" if spec.contrast_filter else None)
    hard = group_statistics([1.0] + [-1.0] * 7, [True] + [False] * 7)  # contrast, c = 1/8 below c_low
    assert gate(hard, p) == ("too_hard" if spec.competence_band else None)
    assert gate(group_statistics([1.0] * 4 + [-1.0] * 4, [True] * 4 + [False] * 4), p) is None  # in the band


@pytest.mark.parametrize("mode", list(MODES))
def test_the_rollout_reads_dynamic_sampling_and_anchors(mode, tmp_path):
    """B = 2 hopeless states first; the pool holds two mixed states more. Dynamic sampling draws further rounds
    until two groups are accepted; an anchoring mode anchors the hopeless (all wrong) groups beside them."""
    spec = MODES[mode]
    p = SalvageDSParams(mode=mode, c_low=0.2, c_high=0.8, lam=1.0, max_rounds=3, anchor="failing")
    rows = make_states(4)
    hopeless, mixed = prepared("hopeless", rows[:2]), prepared("mixed", rows[2:])
    log = tmp_path / "groups.jsonl"
    step = SalvageDSStep(p, PROCESSOR, PromptConfig(include_thought=False, history_k=0),
                         pool=GroupPool(hopeless + mixed, p), group_log=log, sampler=ScriptedSampler())  # fmt: skip
    torch.manual_seed(0)
    rolled = step.rollout(torch.nn.Linear(1, 1), {"states": hopeless})
    groups = [json.loads(line) for line in log.read_text().splitlines()]
    first = [g["decision"] for g in groups if g["round"] == 1]
    if not spec.contrast_filter:
        assert first == ["accepted", "accepted"]  # nothing rejects a group
    else:
        assert first == ["anchored" if spec.anchors else "rejected"] * 2
    metrics = rolled["rollout_metrics"]
    assert metrics["rounds"] == (2 if spec.dynamic_sampling and spec.contrast_filter else 1)
    assert rolled["n_anchored"] == (2 if spec.anchors else 0)
    assert rolled["n_accepted"] == 2 * 8  # two accepted groups of G = 8 samples, whichever mode
    assert rolled["loss_tokens"]["anchored_group"] == rolled["n_anchored"]
