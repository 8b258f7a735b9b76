"""Why a state is critical, its ``origin``: an online divergence, a wrong greedy action, or spread samples (that
precedence), and the routine ``ballast``. The offline states are probed for real through the served-policy path
(the real OpenAI client against the local test server on 127.0.0.1), the server answering greedy requests
(``temperature: 0``) one way and sampled ones another: a tiny model cannot be made to disagree with its own
samples on purpose. The online state of a real failed rollout is tests/mining/test_probing.py's."""

from __future__ import annotations

import polars as pl
import pytest

from rmsweb_kedro.measures.mining import CRITICAL_STATE_SCHEMA, FailureMode, Origin, with_origins
from rmsweb_kedro.measures.probing import MiningParams, draw_rollout_tasks
from rmsweb_kedro.pipelines.mining.nodes import (
    prepare_corpus,
    probe_offline,
    report_mining,
    select_critical_states,
)
from tests.collect.local_openai_server import LocalChatServer
from tests.mining.test_in_sft import probed
from tests.mining.test_selection import frame, state

RIGHT, WRONG = "click(1)", "click(2)"  # every state's reference action is click(1)
#: instruction -> (greedy reply, sampled reply) the server gives
REPLIES = {
    "buy a hat": (WRONG, RIGHT),  # greedy wrong, samples right: greedy_wrong at competence 1
    "buy a mug": (WRONG, WRONG),  # greedy wrong, samples wrong: greedy_wrong (before samples_spread)
    "buy a lamp": (RIGHT, WRONG),  # greedy right, samples wrong: samples_spread
    "buy a scarf": (RIGHT, RIGHT),  # routine
    "buy a sock": (RIGHT, RIGHT),  # routine
    "buy a cup": (RIGHT, RIGHT),  # routine
}
HELD_OUT = {"buy a hat", "buy a scarf"}  # the probe pool: held out of SFT


def respond(body: dict) -> str:
    text = " ".join(
        part["text"] for m in body["messages"] if isinstance(m["content"], list) for part in m["content"]
        if part["type"] == "text"
    ) + " ".join(m["content"] for m in body["messages"] if isinstance(m["content"], str))  # fmt: skip
    (greedy, sampled), *_ = [replies for task, replies in REPLIES.items() if task in text]
    return f"Action: {greedy if body.get('temperature') == 0 else sampled}"


@pytest.fixture(scope="module")
def probes():
    """The corpus of REPLIES' states (training states, then the pool) probed with K = 4 through the server."""
    rows = [state(i, instruction=task) for i, task in enumerate(REPLIES)]
    train = frame([r for r in rows if r["instruction"] not in HELD_OUT])
    pool = frame([r for r in rows if r["instruction"] in HELD_OUT])
    with LocalChatServer() as server:
        server.respond = respond
        params = {
            "scoring": {"k": 4, "batch_size": 2},
            "policy": {"kind": "openai", "endpoint": {"base_url": server.base_url, "model": "m"}},
            "online": {"rollouts": 0},
        }
        offline = probe_offline(prepare_corpus(train, pool, params), None, params)
    return offline.sort("instruction")


def by_task(table: pl.DataFrame, column: str) -> dict[str, object]:
    return dict(table.select("instruction", column).iter_rows())


def test_greedy_wrong_and_spread_samples_are_told_apart(probes):
    assert by_task(probes, "step_success") == {t: g == RIGHT for t, (g, _) in REPLIES.items()}
    assert by_task(probes, "competence") == {t: float(s == RIGHT) for t, (_, s) in REPLIES.items()}
    assert by_task(probes, "origin") == {
        "buy a hat": "greedy_wrong", "buy a mug": "greedy_wrong", "buy a lamp": "samples_spread",
        "buy a scarf": None, "buy a sock": None, "buy a cup": None,
    }  # fmt: skip
    # the failure mode is the greedy action's where it is wrong, else the wrong samples'
    assert by_task(probes, "failure_mode")["buy a hat"] == FailureMode.WRONG_ELEMENT.value


def online_state(competence: float) -> pl.DataFrame:
    """A divergence state of a failed rollout, probed: the rollout's action was wrong there."""
    row = state(9, instruction="buy a tie")
    return probed([row], [competence], [True], source="online").with_columns(
        pl.lit(True).alias("step_success")
    )


def test_origins_by_precedence_and_the_report_adds_up(probes):
    online = online_state(1.0)  # the re-probe finds it right throughout: still the episode's divergence
    params = {"ballast_share": 0.25, "competence_threshold": 0.5, "seed": 0}
    mined = select_critical_states(probes, online, params)
    assert mined.schema == CRITICAL_STATE_SCHEMA
    # precedence first, then competence: the divergence, the greedy-wrong states (mug 0.0, hat 1.0), the spread one
    assert mined["origin"].to_list()[:4] == [
        "online_divergence",
        "greedy_wrong",
        "greedy_wrong",
        "samples_spread",
    ]
    assert mined["instruction"].to_list()[:4] == ["buy a tie", "buy a mug", "buy a hat", "buy a lamp"]
    assert mined["origin"].to_list()[4:] == ["ballast"] and mined["selection"].to_list()[4:] == ["ballast"]
    report = report_mining(probes, online, mined, {"rollouts": 1}, params)
    by_origin = report["by_origin"]
    assert {o: (c["states"], c["selected"]) for o, c in by_origin.items()} == {
        "online_divergence": (1, 1), "greedy_wrong": (2, 2), "samples_spread": (1, 1),
        "ballast": (3, 1),  # three routine states, one drawn (a quarter of the five)
    }  # fmt: skip
    assert sum(c["selected"] for c in by_origin.values()) == report["mined_states"] == mined.height
    # by in_sft: the hat is a probe-pool state, the mug a training one
    assert by_origin["greedy_wrong"]["not_in_sft"] == {"states": 1, "selected": 1}
    assert by_origin["greedy_wrong"]["in_sft"] == {"states": 1, "selected": 1}
    assert by_origin["online_divergence"]["in_sft"] == {"states": 1, "selected": 1}
    for counts in by_origin.values():
        assert counts["in_sft"]["states"] + counts["not_in_sft"]["states"] == counts["states"]
    # the critical states the other tables count are the same four
    assert report["critical_in_corpus"] == 3 and report["concentration"]["mined"]["share_routine"] == 1 / 5
    assert report["by_in_sft"]["in_sft"]["online"]["critical"] == 1


def test_mining_critical_chooses_the_origins(probes):
    online = online_state(1.0)
    # today's criterion alone: competence below the threshold, whatever the greedy action or the source
    spread = select_critical_states(probes, online, {"ballast_share": 0.0, "critical": ["samples_spread"]})
    assert by_task(spread, "origin") == {"buy a mug": "samples_spread", "buy a lamp": "samples_spread"}
    greedy = select_critical_states(probes, online, {"ballast_share": 0.0, "critical": ["greedy_wrong"]})
    assert set(greedy["instruction"]) == {"buy a hat", "buy a mug"}  # the online state's re-probe is right
    # the cap keeps the origins by precedence: the divergence, then a greedy-wrong state
    capped = select_critical_states(probes, online, {"ballast_share": 0.0, "cap": 2})
    assert capped["origin"].to_list() == ["online_divergence", "greedy_wrong"]
    report = report_mining(probes, online, capped, {}, {"ballast_share": 0.0, "cap": 2})
    assert report["by_origin"]["greedy_wrong"] == {
        "states": 2, "selected": 1,
        "in_sft": {"states": 1, "selected": 1}, "not_in_sft": {"states": 1, "selected": 0},
    }  # fmt: skip
    with pytest.raises(ValueError, match="critical"):
        MiningParams.model_validate({"critical": []})
    with pytest.raises(ValueError, match="critical"):
        MiningParams.model_validate({"critical": ["ballast"]})


def test_an_unprobed_state_or_the_environments_failure_has_no_origin():
    table = probed([state(i, instruction=f"t{i}") for i in range(3)], [None, 0.0, 0.0], [True] * 3)
    table = table.with_columns(
        pl.Series("step_success", [None, False, None], dtype=pl.Boolean),
        pl.Series("failure_mode", [None, "environment_error", "wrong_element"]),
    )
    assert with_origins(table, list(Origin)[:3], 0.5)["origin"].to_list() == [None, None, "samples_spread"]


def test_all_rollouts_is_every_task_with_a_reference(sandbox_task_list):
    candidates = [t for t in sandbox_task_list if t.split == "train"][:7]
    in_sft = {t.id: t.id != candidates[3].id for t in candidates}
    config = MiningParams.model_validate({"online": {"rollouts": "all"}})
    drawn = draw_rollout_tasks(candidates, in_sft, config)
    assert drawn[0] == candidates[3] and {t.id for t in drawn} == {t.id for t in candidates}
    assert len(drawn) == len(candidates)
    with pytest.raises(ValueError):
        MiningParams.model_validate({"online": {"rollouts": "some"}})
