"""The evaluation's statistics, tables, plots and report on hand-made per-model tables, and the downstream part of
the ``evaluate`` pipeline run by Kedro's runner on them."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml
from kedro.io import DataCatalog, MemoryDataset
from kedro.runner import SequentialRunner

from rmsweb_kedro.contracts.schema import JudgeSpec, Task
from rmsweb_kedro.measures import evaluation, figures, report, reporting
from rmsweb_kedro.measures.mining import EpisodeFailure, FailureMode, classify_episode
from rmsweb_kedro.measures.scoring import score_step
from rmsweb_kedro.pipelines.evaluate import nodes
from rmsweb_kedro.pipelines.evaluate.pipeline import MODELS, create_pipeline

REPO = Path(__file__).resolve().parents[2]
PARAMS = {
    "online": {"runs": 2},
    "claims": [
        {"key": "online_success_points", "models": ["rmsweb", "sft"], "claim": "RMSWeb beats SFT",
         "paper": "+2.4 to +7.0", "paper_low": 1.2, "paper_high": 7.7},
        {"key": "reflection_steps_saved_pct", "claim": "shorter", "paper": "up to ~20%", "paper_low": 0.0,
         "paper_high": 20.0},
        {"key": "online_success_points", "models": ["sft", "base"], "claim": "SFT beats base", "paper": "implied"},
    ],
    "figures": {"success_vs_cost": "evaluate/success_vs_cost.png"},
}  # fmt: skip
#: Claims of these tests are online or from the collection log: no offline prediction is needed.
NO_PREDICTIONS = pl.DataFrame(schema=evaluation.OFFLINE_PREDICTION_SCHEMA)


def test_wilson_interval_matches_known_values():
    low, high = reporting.wilson_interval(8, 10, 0.95)
    assert low == pytest.approx(0.4902, abs=1e-3) and high == pytest.approx(0.9433, abs=1e-3)
    low, high = reporting.wilson_interval(0, 20, 0.95)
    assert low == pytest.approx(0.0, abs=1e-12) and high == pytest.approx(0.1611, abs=1e-3)
    assert reporting.wilson_interval(0, 0) == (None, None)
    assert reporting.z_score(0.95) == pytest.approx(1.95996, abs=1e-4)


def _task(task_id: str, site: str, split: str) -> Task:
    return Task(id=task_id, source="sandbox", site=site, start_url=f"http://{site}.sandbox.test/", instruction="x",
                split=split, judge=JudgeSpec(kind="sandbox_checker"))  # fmt: skip


def test_online_tasks_keep_the_held_out_site_apart_and_are_the_same_each_time():
    tasks = [_task(f"shop-{i}", "shop", "test") for i in range(10)] + [
        _task(f"hotels-{i}", "hotels", "test") for i in range(5)
    ]
    tasks += [_task("shop-train", "shop", "train")]
    online = evaluation.OnlineParams(max_tasks=3, max_held_out_tasks=2)
    chosen = evaluation.select_online_tasks(tasks, online, seed=0)
    assert [t.site for t in chosen] == ["shop"] * 3 + ["hotels"] * 2
    assert "shop-train" not in {t.id for t in chosen}
    assert [t.id for t in evaluation.select_online_tasks(list(reversed(tasks)), online, seed=0)] == [
        t.id for t in chosen
    ]
    everything = evaluation.select_online_tasks(
        tasks, evaluation.OnlineParams(max_tasks=None, max_held_out_tasks=None), 0
    )
    assert len(everything) == 15


def predictions(model: str, replies: list[tuple[str, str]]) -> pl.DataFrame:
    rows = [
        {"model": model, "state_id": f"t{i}:0", "task_id": f"t{i}", "site": "shop", "reference_action": ref,
         "reply": reply, **score_step(ref, reply).row()}
        for i, (ref, reply) in enumerate(replies)
    ]  # fmt: skip
    return pl.DataFrame(rows, schema=evaluation.OFFLINE_PREDICTION_SCHEMA)


def episodes(
    model: str,
    outcomes: list[tuple[bool | None, int, str]],
    held_out_from: int = 99,
    runs: int = 2,
    val_tasks: int = 0,
) -> pl.DataFrame:
    """(success, steps, termination) per task, the same for every run; the first ``val_tasks`` tasks of the
    sandbox's val split, the others of test."""
    rows = []
    for run in range(runs):
        for i, (success, steps, termination) in enumerate(outcomes):
            rows.append(
                {"model": model, "run": run, "task_id": f"t{i}", "site": "hotels" if i >= held_out_from else "shop",
                 "level": "easy", "split": "val" if i < val_tasks else "test", "held_out": i >= held_out_from, "success": success,
                 "termination": termination, "n_steps": steps, "prompt_tokens": 100 * steps,
                 "completion_tokens": 10 * steps, "cost_usd": 0.0, "wall_s": 0.5 * steps, "judge": "sandbox-checker/v1",
                 "judge_reason": ""}
            )  # fmt: skip
    return pl.DataFrame(rows, schema=evaluation.EPISODE_SCHEMA)


OFFLINE = {
    "base": [("click(3)", "garbage"), ('type(5, "Paris")', "click(5)"), ("click(4)", "click(9)")],
    "sft": [("click(3)", "click(3)"), ('type(5, "Paris")', 'type(5, "Rome")'), ("click(4)", "click(4)")],
    "rmsweb": [("click(3)", "click(3)"), ('type(5, "Paris")', 'type(5, "paris")'), ("click(4)", "click(4)")],
}
ONLINE = {
    "base": [
        (False, 10, "max_steps"),
        (False, 3, "model_error"),
        (None, 0, "env_error"),
        (False, 10, "max_steps"),
    ],
    "sft": [(True, 4, "stop"), (False, 10, "max_steps"), (True, 6, "answer"), (False, 5, "answer")],
    "rmsweb": [(True, 4, "stop"), (True, 5, "stop"), (True, 6, "answer"), (False, 5, "answer")],
}


def test_comparison_table_per_model():
    offline = evaluation.offline_metrics(pl.concat([predictions(m, r) for m, r in OFFLINE.items()]))
    online = pl.concat([episodes(m, o, held_out_from=3) for m, o in ONLINE.items()])
    table = nodes.compare_models(offline, online, PARAMS)
    rows = {r["model"]: r for r in table.iter_rows(named=True)}
    assert list(rows) == ["base", "sft", "rmsweb"]
    assert rows["base"]["invalid_format_rate"] == pytest.approx(1 / 3)
    assert (
        rows["sft"]["step_success_rate"] == pytest.approx(2 / 3)
        and rows["rmsweb"]["step_success_rate"] == 1.0
    )
    # base: the environment error is neither success nor failure.
    assert (rows["base"]["episodes"], rows["base"]["env_errors"], rows["base"]["success_rate"]) == (8, 2, 0.0)
    assert rows["rmsweb"]["success_rate"] == 0.75 and rows["sft"]["success_rate"] == 0.5
    assert rows["sft"]["success_low"] < 0.5 < rows["sft"]["success_high"]
    assert rows["sft"]["run_std"] == 0.0  # both runs alike
    assert rows["sft"]["steps_on_solved"] == 5.0 and rows["rmsweb"]["steps_on_solved"] == 5.0
    assert rows["sft"]["tokens_per_task"] == pytest.approx(110 * 25 / 4)

    breakdown = nodes.online_breakdown(online, PARAMS)
    held = breakdown.filter((pl.col("model") == "rmsweb") & (pl.col("by") == "sites"))
    assert dict(zip(held["group"], held["success_rate"], strict=True)) == {
        "held-out site": 0.0,
        "training sites": 1.0,
    }


def test_step_success_by_kind_of_state():
    from tests.fixtures_model import make_states

    # The synthetic shop states: type the item, pick it out of a list of four by its name, add it to the cart.
    states = make_states(n_tasks=6)
    kinds = [evaluation.step_kind(s["reference_action"], s["axtree"], s["instruction"]) for s in states]
    assert kinds == ["type textbox", "click link the task names", "click button"] * 6
    # A link the task does not name (the cart), a wait and an answer, which target no element.
    page = states[1]["axtree"]
    assert evaluation.step_kind("click(3)", page, states[1]["instruction"]) == "click link"
    assert evaluation.step_kind("wait(1)", page, "x") == "wait"
    assert evaluation.step_kind('answer("12:00")', page, "x") == "answer"

    def scored(model: str, right: set[int]) -> pl.DataFrame:
        rows = [
            {"model": model, "state_id": s["state_id"], "task_id": s["task_id"], "site": "shop",
             "reference_action": s["reference_action"], "step_kind": kind,
             **score_step(s["reference_action"], s["reference_action"] if i in right else "click(99)").row()}
            for i, (s, kind) in enumerate(zip(states, kinds, strict=True))
        ]  # fmt: skip
        return pl.DataFrame(rows, schema=evaluation.OFFLINE_PREDICTION_SCHEMA)

    # sft gets every typing and button step right and 2 of the 6 picks; base only the first typing step.
    sft = scored("sft", {i for i in range(18) if i % 3 != 1} | {1, 4})
    table = nodes.offline_by_step_kind(pl.concat([scored("base", {0}), sft]), PARAMS)
    assert table["model"].to_list() == ["base"] * 3 + ["sft"] * 3  # in the order the models were evaluated
    rows = {(r["model"], r["step_kind"]): r for r in table.iter_rows(named=True)}
    assert rows["sft", "click link the task names"]["step_success_rate"] == pytest.approx(2 / 6)
    assert rows["sft", "type textbox"]["step_success_rate"] == 1.0
    assert rows["base", "type textbox"]["step_success_rate"] == pytest.approx(1 / 6)
    assert rows["base", "click button"]["step_success_rate"] == 0.0
    low, high = reporting.wilson_interval(2, 6, 0.95)
    pick = rows["sft", "click link the task names"]
    assert (pick["states"], pick["success_low"], pick["success_high"]) == (6, low, high)


def test_breakdown_reports_each_sandbox_split_apart():
    # rmsweb solves its two val tasks and one of its two test tasks, each in both runs.
    online = episodes("rmsweb", ONLINE["rmsweb"], val_tasks=2)
    by_split = nodes.online_breakdown(online, PARAMS).filter(pl.col("by") == "split")
    assert by_split.select("group", "episodes", "success_rate").rows() == [("test", 4, 0.5), ("val", 4, 1.0)]
    assert all(by_split["success_low"] < by_split["success_high"])


def collect_log(attempts: list[tuple[str, str, int, bool, int]]) -> pl.DataFrame:
    """A hand-made collection log in the collect pipeline's own schema (the joint with collect)."""
    from rmsweb_kedro.contracts.schema import COLLECTION_LOG_SCHEMA

    return pl.DataFrame(
        [
            {"mode": mode, "task_id": task, "site": "shop", "attempt": a, "success": ok, "termination": "stop",
             "n_steps": steps, "prompt_tokens": 10, "completion_tokens": 1, "cost_usd": 0.0}
            for mode, task, a, ok, steps in attempts
        ],
        schema=COLLECTION_LOG_SCHEMA,
    )  # fmt: skip


def collect_stats(attempts: list[tuple[str, str, int, bool, int]]) -> dict:
    """The collect pipeline's own ``collection_stats`` over a hand-made collection log."""
    from rmsweb_kedro.pipelines.collect.nodes import collection_stats

    return collection_stats(collect_log(attempts), {"modes": sorted({a[0] for a in attempts})})


ATTEMPTS = [
    ("independent_retries", "t1", 1, False, 9), ("independent_retries", "t1", 2, True, 10),
    ("independent_retries", "t2", 1, False, 7),
    ("reflection_retries", "t1", 1, False, 9), ("reflection_retries", "t1", 2, True, 8),
    ("reflection_retries", "t2", 1, True, 8),
]  # fmt: skip


def test_collection_table_and_claims():
    stats = report.collection_table(collect_stats(ATTEMPTS))
    rows = {r["mode"]: r for r in stats.iter_rows(named=True)}
    assert rows["independent_retries"]["yield"] == 0.5 and rows["reflection_retries"]["yield"] == 1.0
    assert rows["reflection_retries"]["mean_steps_success"] == 8.0
    assert rows["independent_retries"]["attempts_per_success"] == 3.0

    online = pl.concat([episodes(m, o) for m, o in ONLINE.items()])
    claims = nodes.claims_table(online, NO_PREDICTIONS, collect_log(ATTEMPTS), PARAMS)
    measured = dict(zip(claims["claim"], claims["this_run"], strict=True))
    # rmsweb - sft over 8 (task, run) pairs: t1 won by rmsweb alone in both runs.
    assert measured["RMSWeb beats SFT"] == pytest.approx(25.0)
    assert measured["shorter"] == pytest.approx(20.0)  # t1, solved by both: 8 steps vs 10
    # sft - base: base's environment error on t2 leaves 6 pairs, of which sft alone wins t0 twice.
    assert measured["SFT beats base"] == pytest.approx(100 * 2 / 6)
    assert claims["n"].to_list() == [8, 1, 6]
    assert claims["same_direction"].to_list() == [True, True, True]
    assert claims["within_paper_range"].to_list() == [False, True, None]
    # One task both solved: a figure without an interval, and the table says why.
    shorter = claims.row(1, named=True)
    assert (shorter["low"], shorter["interval"], shorter["resolved"]) == (None, None, None)
    assert "no interval: under 2 tasks" in shorter["measured_as"]
    # One mode only: the reflection claim is not measured, and the table says why.
    reflection_only = collect_log([a for a in ATTEMPTS if a[0] == "reflection_retries"])
    lone = nodes.claims_table(online, NO_PREDICTIONS, reflection_only, PARAMS)
    assert lone["this_run"][1] is None and "needs reflection_retries" in lone["measured_as"][1]
    assert lone["same_direction"][1] is None and lone["resolved"][1] is None
    swapped = online.with_columns(pl.col("model").replace({"sft": "rmsweb", "rmsweb": "sft"}))
    worse = nodes.claims_table(swapped, NO_PREDICTIONS, collect_log(ATTEMPTS), PARAMS)
    assert worse["this_run"][0] == pytest.approx(-25.0) and worse["same_direction"][0] is False


def test_paired_interval_and_mcnemar_match_published_values():
    """Newcombe's paired score interval and McNemar's exact test on the Cavo et al. (2012) table worked in
    Fagerland, Lydersen & Laake, *Statistical Analysis of Contingency Tables* (2017), ch. 8: a = 59, b = 6,
    c = 16, d = 80; difference -0.0621 (95 % CI -0.1186 to -0.0046), exact McNemar p = 0.052."""
    low, high = reporting.paired_difference_interval(59, 6, 16, 80, 0.95)
    assert low == pytest.approx(-0.1186, abs=1e-4) and high == pytest.approx(-0.0046, abs=1e-4)
    assert reporting.mcnemar_exact_p(6, 16) == pytest.approx(0.0525, abs=1e-4)
    assert reporting.mcnemar_exact_p(7, 0) == pytest.approx(2 / 2**7)
    assert reporting.mcnemar_exact_p(0, 0) is None
    assert reporting.paired_difference_interval(0, 0, 0, 0) == (None, None)


def solved(
    model: str, wins: set[int], tasks: int = 54, env_errors: frozenset[int] = frozenset()
) -> pl.DataFrame:
    """One run of ``model`` over tasks t0..t{tasks-1}: success on ``wins``, an environment error on ``env_errors``."""
    outcomes = [(None, 0, "env_error") if i in env_errors else (i in wins, 5, "answer") for i in range(tasks)]
    return episodes(model, outcomes, runs=1)


def claim(table: pl.DataFrame, text: str) -> dict:
    return table.row(next(i for i, c in enumerate(PARAMS["claims"]) if c["claim"] == text), named=True)


def test_paired_online_differences_on_the_same_episodes():
    sft_wins = set(range(7))
    log = collect_log([])
    # 7/54 against 0/54 on the same tasks: resolved (7 discordant pairs, all sft's).
    table = nodes.claims_table(
        pl.concat([solved("base", set()), solved("sft", sft_wins)]), NO_PREDICTIONS, log, PARAMS
    )
    row = claim(table, "SFT beats base")
    assert row["this_run"] == pytest.approx(100 * 7 / 54) and row["n"] == 54
    assert 0 < row["low"] < row["this_run"] < row["high"] and row["resolved"] is True
    assert row["interval"] == reporting.PAIRED_INTERVAL and row["p_value"] == pytest.approx(2 / 2**7)
    # what 54 pairs at this discordance could have detected: sqrt(7/54 - (7/54)^2) / sqrt(54) x 2.8016
    assert row["mde"] == pytest.approx(100 * 2.80158 * ((7 / 54) * (47 / 54)) ** 0.5 / 54**0.5, rel=1e-4)
    assert "54 (task, run) pairs" in row["measured_as"]
    # 1/54 against 0/54: not resolved.
    table = nodes.claims_table(
        pl.concat([solved("base", set()), solved("sft", {0})]), NO_PREDICTIONS, log, PARAMS
    )
    row = claim(table, "SFT beats base")
    assert row["low"] < 0 < row["this_run"] < row["high"] and row["resolved"] is False
    # Identical models: 0, with an interval around it, and no discordant pair to test.
    table = nodes.claims_table(
        pl.concat([solved("sft", sft_wins), solved("rmsweb", sft_wins)]), NO_PREDICTIONS, log, PARAMS
    )
    row = claim(table, "RMSWeb beats SFT")
    assert row["this_run"] == 0 and row["low"] < 0 < row["high"] and row["resolved"] is False
    assert row["p_value"] is None and "no discordant pair" in row["measured_as"]
    # no discordant pair leaves no spread to estimate: the MDE is the interval's
    assert row["mde"] == pytest.approx(reporting.interval_mde(row["low"], row["high"])) and row["mde"] > 0
    # Environment errors are not judged: base's on t0-t2 take those pairs out (4 of sft's wins remain).
    errors = frozenset({0, 1, 2})
    table = nodes.claims_table(pl.concat([solved("base", set(), env_errors=errors), solved("sft", sft_wins)]), NO_PREDICTIONS,
                               log, PARAMS)  # fmt: skip
    row = claim(table, "SFT beats base")
    assert row["n"] == 51 and row["this_run"] == pytest.approx(100 * 4 / 51)
    assert "51 (task, run) pairs" in row["measured_as"]
    # No task in common: not measured, and why; a model without episodes likewise.
    other = solved("base", set()).with_columns(pl.col("task_id").str.replace("t", "u"))
    table = nodes.claims_table(pl.concat([other, solved("sft", sft_wins)]), NO_PREDICTIONS, log, PARAMS)
    row = claim(table, "SFT beats base")
    assert (row["this_run"], row["low"], row["high"], row["resolved"], row["n"]) == (
        None,
        None,
        None,
        None,
        0,
    )
    assert "no (task, run) judged for both" in row["measured_as"]
    assert "no online episode of rmsweb" in claim(table, "RMSWeb beats SFT")["measured_as"]


def test_claims_between_any_two_models():
    """``models: [first, second]`` with the paired keys: the same paired difference as the default claims, and
    steps on the tasks both solved with a paired bootstrap interval."""
    params = {"claims": [
        {"key": "online_success_points", "models": ["b", "a"], "claim": "b beats a", "paper": "-"},
        {"key": "steps_on_solved_pct", "models": ["b", "a"], "claim": "b is shorter", "paper": "-"},
        {"key": "steps_on_solved_pct", "models": ["b", "c"], "claim": "b is shorter than c", "paper": "-"},
        {"key": "offline_step_points", "models": ["b", "a"], "claim": "b steps better", "paper": "-"},
    ]}  # fmt: skip
    # a solves t0-t5 in 10 steps; b solves t0-t9, t0-t3 in 6 steps, the rest in 8.
    a = episodes("a", [(i < 6, 10, "answer") for i in range(20)], runs=1)
    b = episodes("b", [(i < 10, 6 if i < 4 else 8, "answer") for i in range(20)], runs=1)
    c = episodes("c", [(False, 14, "max_steps")] * 20, runs=1)
    # Offline: b right on s0-s29 of 40 held-out states, a on s0-s9 and s30-s34 (s35 unscored: null).
    predictions = pl.DataFrame(
        [{"model": model, "state_id": f"s{i}", "step_success": None if i == 35 else right(i)}
         for model, right in (("a", lambda i: i < 10 or 30 <= i < 35), ("b", lambda i: i < 30))
         for i in range(40)],
        schema_overrides={"step_success": pl.Boolean},
    )  # fmt: skip
    table = nodes.claims_table(pl.concat([a, b, c]), predictions, collect_log([]), params)
    success, steps, none, offline = table.iter_rows(named=True)
    # 39 states scored for both: b alone right on s10-s29 (20), a alone on s30-s34 (5)
    assert offline["n"] == 39 and offline["this_run"] == pytest.approx(100 * 15 / 39)
    assert offline["resolved"] is True and offline["p_value"] == pytest.approx(
        reporting.mcnemar_exact_p(20, 5)
    )
    assert "39 held-out states scored for both: 20 won by b alone, 5 by a alone" in offline["measured_as"]
    assert success["this_run"] == pytest.approx(100 * 4 / 20) and success["n"] == 20
    assert success["interval"] == reporting.PAIRED_INTERVAL and success["low"] < 20 < success["high"]
    # over t0-t5, both solved: b takes (4 x 6 + 2 x 8) / 6 steps, a 10
    assert steps["this_run"] == pytest.approx(100 * (1 - (4 * 6 + 2 * 8) / 6 / 10)) and steps["n"] == 6
    assert steps["interval"] == reporting.BOOTSTRAP_INTERVAL and 20 <= steps["low"] <= steps["high"] <= 40
    assert steps["resolved"] is True
    assert none["this_run"] is None and none["n"] == 0 and "no task solved by both" in none["measured_as"]
    with pytest.raises(ValueError, match="`models` \\[first, second\\] goes with the keys"):
        evaluation.Claim(key="online_success_points", claim="x", paper="-")
    with pytest.raises(ValueError, match="goes with the keys"):
        evaluation.Claim(key="reflection_steps_saved_pct", claim="x", paper="-", models=("sft", "base"))


def test_a_model_of_several_seeds_is_measured_a_seed_at_a_time_and_pooled():
    """Three training seeds of rmsweb (labels rmsweb_s0..s2) against one SFT model on the same 40 held-out
    states: a row a seed (Newcombe, as for two models) and a pooled row, the mean of the seeds' paired differences
    with the two-way bootstrap over states and seeds; a seed that matches SFT pulls the pooled figure down."""
    params = {"claims": [{"key": "offline_step_points", "models": ["rmsweb", "sft"], "claim": "c", "paper": "-"}],
              "bootstrap_resamples": 4000}  # fmt: skip
    sft = {i for i in range(40) if i < 20}  # right on s0-s19
    wins = {0: set(range(28)), 1: set(range(26)), 2: set(range(20))}  # +8, +6 and +0 states over sft
    rows = [{"model": model, "state_id": f"s{i}", "step_success": i in right}
            for model, right in [("sft", sft), *((f"rmsweb_s{k}", w) for k, w in wins.items())]
            for i in range(40)]  # fmt: skip
    predictions = pl.DataFrame(rows, schema_overrides={"step_success": pl.Boolean})
    table = nodes.claims_table(
        pl.DataFrame(schema=evaluation.EPISODE_SCHEMA), predictions, collect_log([]), params
    )
    assert table["seeds"].to_list() == ["0", "1", "2", "pooled 0, 1, 2"]
    per_seed = table.head(3)
    assert per_seed["this_run"].to_list() == pytest.approx([100 * 8 / 40, 100 * 6 / 40, 0.0])
    assert set(per_seed["interval"]) == {reporting.PAIRED_INTERVAL}
    pooled = table.row(3, named=True)
    # (8 + 6 + 0) / (3 x 40) = 11.7 points over 120 (state, seed) pairs
    assert pooled["this_run"] == pytest.approx(100 * 14 / 120) and pooled["n"] == 120
    assert (
        pooled["interval"] == reporting.SEEDS_INTERVAL and pooled["low"] < pooled["this_run"] < pooled["high"]
    )
    assert "seed 0 +20.0, seed 1 +15.0, seed 2 +0.0" in pooled["measured_as"]
    # resampling seeds too: the interval is wider than resampling states alone would make it
    grid = [[int(i in wins[k]) - int(i in sft) for k in range(3)] for i in range(40)]
    low, high = reporting.pooled_seed_bootstrap(grid, 4000, 0)
    assert (100 * low, 100 * high) == pytest.approx((pooled["low"], pooled["high"]))
    items_only = [sum(row) / 3 for row in grid]
    state_low, state_high = reporting.paired_bootstrap(
        items_only, [0.0] * 40, lambda a, b: (a - b).mean(1), 4000, 0
    )
    assert high - low > state_high - state_low
    assert pooled["mde"] == pytest.approx(100 * reporting.pooled_seeds_mde(grid))
    # its lower end is 0 itself (a resample with seed 2's 0 alone): not resolved, and the report says what it could
    # have detected
    assert pooled["low"] == 0 and pooled["resolved"] is False
    assert report.verdict(pooled, 0.8) == (
        "c (seeds 0, 1, 2 pooled): +11.7 points, not resolved: the interval (+0.0 to "
        f"{pooled['high']:+.1f}, two-way bootstrap (items x seeds)) holds 0, and this design could have detected "
        f"only >= {pooled['mde']:.1f} points at 80% power (n=120: 40 items x 3 seeds)"
    )
    assert per_seed["mde"][2] == pytest.approx(
        reporting.interval_mde(per_seed["low"][2], per_seed["high"][2])
    )


def test_claim_pairs_match_seeds_and_broadcast_a_single_model():
    labels = ["sft", "rl_a_s0", "rl_a_s1", "rl_b_s1", "rl_b_s2"]
    assert report.claim_pairs(labels, "rl_a", "sft") == [(0, "rl_a_s0", "sft"), (1, "rl_a_s1", "sft")]
    assert report.claim_pairs(labels, "rl_a", "rl_b") == [(1, "rl_a_s1", "rl_b_s1")]  # the seeds both have
    assert report.claim_pairs(labels, "sft", "rl_b") == [(1, "sft", "rl_b_s1"), (2, "sft", "rl_b_s2")]
    assert report.claim_pairs(labels, "rl_c", "sft") == []
    assert report.claim_pairs(["rl_a", "rl_a_s0"], "rl_a", "sft") == []  # a model named rl_a is that model


def test_pairs_are_episodes_of_the_same_run():
    """sft wins run 0 and base wins run 1 of the same task: two discordant pairs (pairing across runs would make
    four pairs)."""
    both_runs = episodes("sft", [(True, 4, "answer")])
    sft = both_runs.with_columns(success=pl.col("run") == 0)
    base = both_runs.with_columns(model=pl.lit("base"), success=pl.col("run") == 1)
    assert evaluation.paired_outcomes(pl.concat([sft, base]), "sft", "base") == (0, 1, 1, 0)


def test_report_says_which_paired_differences_are_resolved():
    online = pl.concat([solved("base", set()), solved("sft", set(range(7))), solved("rmsweb", set(range(9)))])
    none = pl.DataFrame(schema=evaluation.OFFLINE_PREDICTION_SCHEMA)
    comparison = nodes.compare_models(evaluation.offline_metrics(none), online, PARAMS)
    claims = nodes.claims_table(online, NO_PREDICTIONS, collect_log(ATTEMPTS), PARAMS)
    markdown = nodes.build_report(
        comparison, nodes.online_breakdown(online, PARAMS), nodes.offline_by_step_kind(none, PARAMS), claims,
        report.collection_table({}),
        reporting.reflection_steps(collect_log(ATTEMPTS)), report.failure_modes(none, online), PARAMS,
    )  # fmt: skip
    assert (
        "| claim | seeds | paper | this_run | low | high | resolved | mde | n | interval | p_value |"
        in markdown
    )
    # MDE at the observed discordance: 2.8016 sqrt(p10 + p01 - (p10 - p01)^2) / sqrt(54), p10 = 7/54 and 2/54
    assert (
        "SFT beats base: +13.0 points (+3.6 to +24.4, Newcombe paired score; could have detected >= 12.8 points "
        "at 80% power (n=54 pairs)), resolved" in markdown
    )
    assert (
        "RMSWeb beats SFT: +3.7 points, not resolved: the interval (-3.5 to +11.7, Newcombe paired score) holds 0, "
        "and this design could have detected only >= 7.2 points at 80% power (n=54 pairs)" in markdown
    )
    assert "not resolved at this n" not in markdown
    assert "| RMSWeb beats SFT | – | +2.4 to +7.0 | 3.7 | -3.47 | 11.7 | no | 7.2 | 54 |" in markdown
    # a higher power asks for a larger effect
    stricter = nodes.claims_table(online, NO_PREDICTIONS, collect_log(ATTEMPTS), PARAMS | {"power": 0.9})
    assert stricter["mde"][0] == pytest.approx(
        claims["mde"][0] * reporting.power_multiplier(0.95, 0.9) / 2.80158, rel=1e-4
    )


def test_steps_saved_has_a_seeded_paired_bootstrap_interval():
    attempts = [  # reflection_retries solves six tasks in fewer steps than independent_retries
        (mode, f"t{i}", 1, True, steps)
        for i, (ours, theirs) in enumerate([(8, 10), (6, 9), (7, 8), (5, 7), (9, 12), (6, 8)])
        for mode, steps in (("reflection_retries", ours), ("independent_retries", theirs))
    ]
    log, online = collect_log(attempts), pl.DataFrame(schema=evaluation.EPISODE_SCHEMA)
    row = claim(nodes.claims_table(online, NO_PREDICTIONS, log, PARAMS), "shorter")
    assert row["this_run"] == pytest.approx(100 * (1 - 41 / 54)) and row["n"] == 6
    assert 0 < row["low"] < row["this_run"] < row["high"] and row["resolved"] is True
    assert row["interval"] == reporting.BOOTSTRAP_INTERVAL and "2000 resamples" in row["measured_as"]
    assert row["mde"] == pytest.approx((row["high"] - row["low"]) / 2 / 1.95996 * 2.80158, rel=1e-4)
    again = claim(nodes.claims_table(online, NO_PREDICTIONS, log, PARAMS), "shorter")
    assert (again["low"], again["high"]) == (row["low"], row["high"])  # seeded
    # Mixed savings: one task much longer with reflection, the interval takes in 0.
    mixed = collect_log(
        attempts + [("reflection_retries", "t6", 1, True, 30), ("independent_retries", "t6", 1, True, 8)]
    )
    row = claim(nodes.claims_table(online, NO_PREDICTIONS, mixed, PARAMS), "shorter")
    assert row["low"] < 0 < row["high"] and row["resolved"] is False


def test_downstream_pipeline_writes_report_and_figures(tmp_path):
    inputs = {f"offline_predictions_{m}": predictions(m, r) for m, r in OFFLINE.items()}
    inputs |= {f"online_episodes_{m}": episodes(m, o) for m, o in ONLINE.items()}
    inputs |= {
        "collection_stats": collect_stats(ATTEMPTS[3:]),
        "collection_log": collect_log(ATTEMPTS[3:]),
        "sft_metrics": {
            "history": [{"step": s, "train/loss": 3.0 / s, "eval/loss": 3.2 / s} for s in (1, 2, 5)]
        },
        "salvage_ds_metrics": pl.DataFrame({"step": [1, 2], "train/loss": [0.5, 0.4]}),
        "params:evaluate": PARAMS,
        "run_manifest": None,  # as when no `kedro run` wrote one (tests/tracking covers the manifest)
        "salvage_ds_report": None,  # the report's Salvage-DS section says so (tests/salvage_ds fills it)
    }
    # The real catalog entries of the evaluate pipeline, written under tmp_path.
    config = yaml.safe_load((REPO / "conf" / "base" / "catalog_evaluate.yml").read_text())
    for entry in config.values():
        entry["filepath"] = str(tmp_path / entry["filepath"])
    catalog = DataCatalog.from_config(config)
    for name, value in inputs.items():
        catalog[name] = MemoryDataset(value)
    pipeline = create_pipeline().from_inputs(*[f"offline_predictions_{m}" for m in MODELS], "collection_stats",
                                             "collection_log", "sft_metrics", *[f"online_episodes_{m}" for m in MODELS])  # fmt: skip
    assert not any(n.name.startswith(("predict_offline", "run_online")) for n in pipeline.nodes)
    SequentialRunner().run(pipeline, catalog)
    markdown = catalog.load("evaluation_report")
    assert "| rmsweb | 3 | 100 | 100 | 100 | 100 | 0 |" in markdown  # offline rates in %
    assert "RMSWeb beats SFT | – | +2.4 to +7.0 | 25 |" in markdown  # 75% - 50%, one model: no seeds
    # every online rate states its k/n; 8 distinct episodes (the helper's rows are not greedy)
    assert "| sft | 8 | 0 | 0 | 0 | 8 | 4/8 | 50 |" in markdown
    assert "### Steps on solved tasks" in markdown
    assert "![success_vs_cost](evaluate/success_vs_cost.png)" in markdown
    page = catalog.load("evaluation_report_html")
    assert '<img src="evaluate/success_vs_cost.png" alt="success_vs_cost"' in page and "<table>" in page
    reporting = tmp_path / "data" / "08_reporting"
    assert (reporting / "report.md").read_text() == markdown
    for plot in ("success_vs_cost", "steps_on_solved", "failure_modes_by_model", "training_curves", "flips"):
        assert (reporting / "evaluate" / f"{plot}.png").stat().st_size > 1000
    comparison = catalog.load("model_comparison")  # the CSV round trip
    assert (
        comparison["model"].to_list() == ["base", "sft", "rmsweb"] and comparison["success_rate"][2] == 0.75
    )

    curves = figures.plot_training_curves(inputs["sft_metrics"], inputs["salvage_ds_metrics"]).axes
    assert [len(ax.lines) for ax in curves] == [2, 1]  # SFT train+eval loss, Salvage-DS train loss
    modes = catalog.load("evaluation_failure_modes")
    base = {
        (r["where"], r["mode"]): r["count"]
        for r in modes.filter(pl.col("model") == "base").iter_rows(named=True)
    }
    assert base == {("offline step", "invalid format"): 1, ("offline step", "wrong action type"): 1,
                    ("offline step", "wrong element"): 1, ("online episode", "ran out of steps"): 4,
                    ("online episode", "unparseable output"): 2, ("online episode", "environment error"): 2}  # fmt: skip


def test_one_failure_taxonomy_for_steps_and_episodes():
    """Failed episodes are counted by mining's episode taxonomy, which shares the environment error with the step
    taxonomy; the report has words for every mode."""
    assert set(report.EPISODE_FAILURE_WORDS) == set(EpisodeFailure)
    assert EpisodeFailure.ENVIRONMENT_ERROR.value == FailureMode.ENVIRONMENT_ERROR.value
    assert (
        classify_episode(None, "max_steps") is EpisodeFailure.ENVIRONMENT_ERROR
    )  # no verdict: not the policy's
    assert classify_episode(True, "answer") is None
    endings = {
        t: classify_episode(False, t)
        for t in ("max_steps", "model_error", "answer", "stop", "critical_point")
    }
    assert endings == {"max_steps": EpisodeFailure.STEP_LIMIT, "model_error": EpisodeFailure.MODEL_ERROR,
                       "answer": EpisodeFailure.WRONG_ANSWER, "stop": EpisodeFailure.WRONG_STATE,
                       "critical_point": EpisodeFailure.OTHER}  # fmt: skip


def test_where_a_wrong_string_came_from():
    """The default run's SFT episodes, first wrong steps (2026-12-04): each kind of string it typed."""
    task, page = "Buy a Lopel jacket from Krakow to Pelsul", 'textbox "Search products" [4]'
    assert (
        evaluation.argument_origin("Lopel jacket", "Lopel jacket", task, page) == "expected"
    )  # submit differed
    assert evaluation.argument_origin("Pelsul", "Krakow", task, page) == "in_task_or_page"  # the other city
    assert evaluation.argument_origin("Lopel kettle", "Lopel jacket", task, page) == "first_word_only"
    assert evaluation.argument_origin("Marvin", "Graz", task, page) == "elsewhere"  # a training city
    assert (
        evaluation.argument_origin("Search", "Graz", task, page) == "in_task_or_page"
    )  # the page counts too
    assert set(report.ARGUMENT_ORIGIN_WORDS) == {
        "expected",
        "in_task_or_page",
        "first_word_only",
        "elsewhere",
    }


def test_failed_episodes_are_counted_by_their_first_wrong_step():
    """Where a failed episode first left its reference (evaluation.reference_divergence) is counted beside how it
    ended; a wrong string argument is split by where it came from, and episodes without a divergence (successes, no
    reference) are not counted there."""
    sft = episodes("sft", ONLINE["sft"], runs=1).with_columns(
        pl.Series("divergence_mode", [None, "wrong_argument", None, "wrong_element"]),
        pl.Series("divergence_argument", [None, "first_word_only", None, None]),
    )
    rows = report.failure_modes(pl.DataFrame(schema=evaluation.OFFLINE_PREDICTION_SCHEMA), sft)
    first = rows.filter(pl.col("where") == "online first wrong step")
    assert dict(zip(first["mode"], first["count"], strict=True)) == {
        "wrong argument (first word copied, the rest not)": 1,
        "wrong element": 1,
    }
    assert rows.filter(pl.col("where") == "online episode")["count"].sum() == 2  # the same two failures
    assert [ax.get_title() for ax in figures.plot_failure_modes(rows).axes][1] == (
        "Failure modes: online first wrong steps"
    )


def test_report_from_empty_evaluations():
    """No held-out state and no episode (e.g. an empty split) still gives tables, figures and a report."""
    predictions = pl.DataFrame(schema=evaluation.OFFLINE_PREDICTION_SCHEMA)
    online = pl.DataFrame(schema=evaluation.EPISODE_SCHEMA)
    comparison = nodes.compare_models(evaluation.offline_metrics(predictions), online, PARAMS)
    assert comparison.height == 0
    modes = report.failure_modes(predictions, online)
    collection = report.collection_table({})
    steps = reporting.reflection_steps(collect_log([]))
    claims = nodes.claims_table(online, NO_PREDICTIONS, collect_log([]), PARAMS)
    assert claims["this_run"].to_list() == [None, None, None]
    assert claims["resolved"].to_list() == [None, None, None] and claims["n"].to_list() == [0, None, 0]
    for figure in (figures.plot_success_vs_cost(comparison), figures.plot_steps_on_solved(online),
                   figures.plot_failure_modes(modes), figures.plot_training_curves(None, [])):  # fmt: skip
        assert figure.axes
    kinds = nodes.offline_by_step_kind(predictions, PARAMS)
    markdown = nodes.build_report(
        comparison, nodes.online_breakdown(online, PARAMS), kinds, claims, collection, steps, modes, PARAMS
    )
    assert (
        markdown.count("_(empty)_") == 8  # the Salvage-DS runs' table too: no salvage_ds_report
        and "No online episode was judged" in markdown
        and "RMSWeb beats SFT | – | +2.4 to +7.0 | – |" in markdown
    )
    assert figures.plot_flips(predictions).axes[0].get_title().endswith("(none)")


def test_greedy_repeats_are_one_episode_in_the_interval_and_the_paired_test():
    """Three greedy runs over t0-t9: sft solves t0 and t1 every run and t2 in run 0 only (the browser made run 0
    another episode), base nothing. The distinct episodes are t0, t1, t2 solved, t2 failed and t3-t9 failed: 3 of
    11 (the rate stays the mean over the 30 runs, 7/30); sampled runs are 30 episodes of their own."""
    outcomes = [(True, 4, "answer")] * 3 + [(False, 14, "max_steps")] * 7
    sft = episodes("sft", outcomes, runs=3).with_columns(
        success=pl.when((pl.col("task_id") == "t2") & (pl.col("run") > 0)).then(False).otherwise("success"),
        greedy=pl.lit(True),
    )
    base = episodes("base", [(False, 14, "max_steps")] * 10, runs=3).with_columns(greedy=pl.lit(True))
    summary = evaluation.success_summary(sft, 0.95)
    assert summary["episodes"] == 30 and summary["distinct_episodes"] == 11
    assert summary["success_rate"] == pytest.approx(7 / 30)
    # Wilson at n = 11, k = 3 by hand: p = 0.27273, z² = 3.8416, centre (p + z²/2n) / (1 + z²/n) = 0.33156,
    # half-width 1.96 · sqrt(p(1 - p)/n + z²/4n²) / (1 + z²/n) = 0.23410
    assert (summary["success_low"], summary["success_high"]) == pytest.approx((0.09746, 0.56566), abs=1e-4)
    # pairs: t0, t1 (won by sft alone), t2 twice (sft alone in run 0; neither in runs 1-2), t3-t9 (neither)
    assert evaluation.paired_outcomes(pl.concat([sft, base]), "sft", "base") == (0, 3, 0, 8)
    # steps saved: rmsweb takes 3 steps wherever sft solved in 4 (t0, t1 every run, t2 in run 0): 3 pairs, not 7
    rmsweb = sft.with_columns(model=pl.lit("rmsweb"), n_steps=pl.lit(3, pl.Int32))
    saved = report.online_steps_saved(pl.concat([rmsweb, sft]), "rmsweb", "sft", evaluation.EvaluateParams())
    assert saved.n == 3 and saved.value == pytest.approx(25.0)

    sampled = sft.with_columns(greedy=pl.lit(False))
    summary = evaluation.success_summary(sampled, 0.95)
    assert summary["distinct_episodes"] == 30
    assert (summary["success_low"], summary["success_high"]) == pytest.approx(
        reporting.wilson_interval(7, 30)
    )
    paired = pl.concat([sampled, base.with_columns(greedy=pl.lit(False))])
    assert evaluation.paired_outcomes(paired, "sft", "base") == (0, 7, 0, 23)
