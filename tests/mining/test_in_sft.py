"""The probe pool in mining: the corpus is the states SFT trained on plus the pool held out of it (``in_sft``), the
rollouts go to the pool's tasks first, and the report counts critical states by ``in_sft`` (``by_in_sft``).
Hand-made tables; the counts worked out by hand in the comments."""

import random

import polars as pl
import pytest

from rmsweb_kedro.measures.mining import (
    CRITICAL_ORIGINS,
    CRITICAL_STATE_SCHEMA,
    FailureMode,
    corpus_states,
    deduplicate_states,
    failure_mode_table,
    in_sft_report,
    with_origins,
)
from rmsweb_kedro.measures.probing import MiningParams, draw_rollout_tasks, task_in_sft
from rmsweb_kedro.pipelines.mining.nodes import (
    plot_failure_modes,
    prepare_corpus,
    report_mining,
    select_critical_states,
)
from tests.mining.test_selection import frame, state

PARAMS = {"competence_threshold": 0.5, "ballast_share": 0.0, "dedup": True}


def origins(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with ``origin`` by PARAMS' threshold, every critical origin counting."""
    return with_origins(frame, CRITICAL_ORIGINS, PARAMS["competence_threshold"])


def probed(rows: list[dict], competences: list[float | None], in_sft: list[bool], source: str = "offline"):
    """STATE rows with the probe columns mining adds (competence as given, one failure mode for the wrong ones; the
    greedy action unknown, so competence and the source decide the origin)."""
    return frame(rows).with_columns(
        pl.Series("competence", competences, dtype=pl.Float64),
        pl.Series("in_sft", in_sft, dtype=pl.Boolean),
        pl.lit(source).alias("source"),
        pl.lit(1, pl.Int32).alias("n_copies"),
        pl.lit(4, pl.Int32).alias("n_samples"),
        pl.lit(None, pl.String).alias("greedy_action"),
        pl.lit(None, pl.Boolean).alias("step_success"),
        pl.when(pl.Series(competences) < 1)
        .then(pl.lit(FailureMode.WRONG_ELEMENT.value))
        .alias("failure_mode"),
        pl.lit([], pl.List(pl.String)).alias("sampled_actions"),
    )


def test_corpus_is_train_then_probe_pool_and_a_state_in_both_counts_as_trained():
    train = frame([state(0), state(1, instruction="buy a hat")])
    pool = frame([state(2), state(3, instruction="buy a lamp")])  # state 2 is state 0 in another task
    corpus = prepare_corpus(train, pool, PARAMS)
    assert corpus["state_id"].to_list() == ["t0:0", "t1:0", "t3:0"]
    assert corpus["in_sft"].to_list() == [
        True,
        True,
        False,
    ]  # SFT saw state 2's prompt and action (as state 0)
    assert corpus["n_copies"].to_list() == [2, 1, 1]
    # no pool: the corpus is what it was before the pool existed, plus in_sft
    alone = prepare_corpus(train, frame([]), PARAMS)
    assert alone.drop("in_sft").equals(deduplicate_states(train)) and alone["in_sft"].all()
    undeduped = prepare_corpus(train, pool, {**PARAMS, "dedup": False})
    assert undeduped["in_sft"].to_list() == [True, True, False, False]
    with pytest.raises(ValueError, match=r"sft_states_probe: missing STATE_SCHEMA columns \['axtree'\]"):
        corpus_states(train, pool.drop("axtree"))


def test_critical_states_are_counted_by_in_sft():
    # offline: trained 1.0, 0.75, 0.25 (1 critical of 3); held out 0.0, 0.25, 1.0, unprobed (2 of 3 probed)
    offline = probed(
        [state(i, instruction=f"task {i}") for i in range(7)],
        [1.0, 0.75, 0.25, 0.0, 0.25, 1.0, None],
        [True, True, True, False, False, False, False],
    )
    # online: one state of a held-out task, critical
    online = probed([state(9, instruction="task 9")], [0.0], [False], source="online")
    mined = select_critical_states(offline, online, PARAMS)
    assert mined.schema == CRITICAL_STATE_SCHEMA
    # critical: the online divergence first (its origin's precedence), then hardest first (competence, then state
    # id): t9 (online), t3 0.0, t2 0.25, t4 0.25
    assert mined["state_id"].to_list() == ["t9:0", "t3:0", "t2:0", "t4:0"]
    assert mined["in_sft"].to_list() == [False, False, True, False]
    report = in_sft_report(origins(offline), origins(online), mined)
    assert report["in_sft"]["offline"] == {
        "states": 3, "probed": 3, "critical": 1, "critical_share": 1 / 3, "mean_competence": 2 / 3,
    }  # fmt: skip
    assert report["not_in_sft"]["offline"] == {
        "states": 4, "probed": 3, "critical": 2, "critical_share": 2 / 3, "mean_competence": 1.25 / 3,
    }  # fmt: skip
    assert report["not_in_sft"]["online"]["critical"] == 1 and report["in_sft"]["online"]["states"] == 0
    assert report["in_sft"]["selected"] == {"critical": 1} and report["not_in_sft"]["selected"] == {
        "critical": 3
    }
    full = select_critical_states(offline, online, {**PARAMS, "rl_corpus": "full"})
    assert full.height == 7 and full["in_sft"].sum() == 3  # every corpus state, training states and the pool
    summary = report_mining(offline, online, mined, {"rollouts": 1}, PARAMS)
    assert summary["by_in_sft"] == report and summary["corpus_states_held_out_of_sft"] == 4
    assert summary["critical_in_corpus"] == 3  # t1's unprobed state is not critical
    # failure modes: every critical state here is a wrong element; offline 1 trained + 2 held out, online 1 held out
    table = failure_mode_table(origins(pl.concat([offline, online])), 2)
    element = table.filter(pl.col("failure_mode") == FailureMode.WRONG_ELEMENT.value)
    assert element.select("source", "n_states", "n_in_sft", "n_not_in_sft").rows() == [
        ("offline", 3, 1, 2),
        ("online", 1, 0, 1),
    ]
    env = table.filter((pl.col("source") == "online") & (pl.col("failure_mode") == "environment_error"))
    # rollouts, not states: no in_sft
    assert env.select("n_states", "n_in_sft", "n_not_in_sft").row(0) == (2, None, None)
    figure = plot_failure_modes(table)
    assert "(1 on states SFT trained on, 3 held out of it)" in figure.axes[0].get_title()


def test_tables_from_before_the_pool_are_states_sft_trained_on():
    old = probed([state(0), state(1, instruction="x")], [0.0, 1.0], [True, True]).drop("in_sft")
    mined = select_critical_states(old, old.clear().with_columns(pl.lit("online").alias("source")), PARAMS)
    assert mined["in_sft"].to_list() == [True]
    report = in_sft_report(origins(old), origins(old.clear()), mined)
    assert report["in_sft"]["offline"]["critical"] == 1 and report["not_in_sft"]["offline"]["states"] == 0


def test_rollouts_go_to_the_probe_pool_first(sandbox_task_list):
    candidates = [t for t in sandbox_task_list if t.split == "train"][:10]
    held_out = {t.id for t in candidates[6:]}  # 4 tasks of the pool
    references = pl.DataFrame(
        {"task_id": [t.id for t in candidates], "in_sft": [t.id not in held_out for t in candidates]}
    )
    in_sft = task_in_sft(references)
    assert in_sft == {t.id: t.id not in held_out for t in candidates}
    config = MiningParams.model_validate({"seed": 3, "online": {"rollouts": 6}})
    drawn = draw_rollout_tasks(candidates, in_sft, config)
    assert {t.id for t in drawn[:4]} == held_out and len({t.id for t in drawn}) == 6
    assert not {t.id for t in drawn[4:]} & held_out
    # no pool (or probe_pool_first off): one seeded draw over every candidate, as before the pool existed
    trained = {t.id: True for t in candidates}
    before = random.Random(3).sample(candidates, 6)
    assert draw_rollout_tasks(candidates, trained, config) == before
    off = MiningParams.model_validate({"seed": 3, "online": {"rollouts": 6, "probe_pool_first": False}})
    assert draw_rollout_tasks(candidates, in_sft, off) == before
    # a references table without in_sft holds states SFT trained on
    assert set(task_in_sft(references.drop("in_sft")).values()) == {True}


def test_mining_reads_the_probe_pool():
    from rmsweb_kedro.pipelines.mining.pipeline import create_pipeline

    pipeline = create_pipeline()
    assert {"sft_states_train", "sft_states_probe"} <= pipeline.inputs()
    for name in ("prepare_mining_corpus", "probe_online"):
        (node,) = [n for n in pipeline.nodes if n.name == name]
        assert {"sft_states_train", "sft_states_probe"} <= set(node.inputs)
