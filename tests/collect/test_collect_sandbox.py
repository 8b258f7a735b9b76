"""Collection end to end in the sandbox: real server, real Chromium, the scripted roles and the checker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from rmsweb_kedro.agents.scripted import ScriptedReflector, ScriptedTeacher, TeacherImperfections
from rmsweb_kedro.contracts.schema import Trajectory, tasks_to_frame
from rmsweb_kedro.episodes.collection import JOURNAL_KEY, CollectParams
from rmsweb_kedro.episodes.episode import run_episode
from rmsweb_kedro.episodes.rollouts import Journal
from rmsweb_kedro.judges.sandbox import SandboxJudge
from rmsweb_kedro.pipelines.collect.nodes import (
    collect_trajectories,
    collection_stats,
    plot_collection,
    publish_raw_trajectories,
    select_collection_tasks,
)
from rmsweb_kedro.web.sandbox import SandboxParams, generate_tasks

pytestmark = pytest.mark.browser

PERFECT = TeacherImperfections(mistake_probs={}, self_correct_prob=0.0)
ALWAYS_WRONG = TeacherImperfections(
    mistake_probs={"choose_option": 1.0, "pick_item": 1.0}, self_correct_prob=0.0
)


def task_with(tasks, decision: str):
    """The first train task whose reference solution has a decision point of this kind."""
    return next(
        t
        for t in tasks
        if t.split == "train" and any(s.get("decision") == decision for s in t.reference_solution or [])
    )


def test_reflection_names_the_mistake_and_the_retry_avoids_it(
    sandbox_task_list, sandbox_server, browser_env, tmp_path
):
    task = task_with(sandbox_task_list, "choose_option")
    judge = SandboxJudge(sandbox_server.session_state)
    failed = run_episode(browser_env, task, ScriptedTeacher(1, ALWAYS_WRONG), judge, max_steps=30)
    assert failed.success is False
    reflection, _ = ScriptedReflector().reflect(task, failed.steps, failed.verdict, None)
    assert reflection.startswith("Wrong decision: ")
    # Every wrong decision the attempt made is named, so the same teacher conditioned on them succeeds.
    retry = run_episode(
        browser_env,
        task,
        ScriptedTeacher(1, ALWAYS_WRONG),
        judge,
        30,
        [reflection],
        attempt=2,
        screenshot_dir=tmp_path / "mode" / "t__a2",
        relative_to=tmp_path / "mode",
    )
    assert retry.success is True and retry.reflections == [reflection]
    assert retry.verdict.judge == "sandbox-checker/v1"
    assert len(retry.steps) == len(task.reference_solution)
    assert retry.steps[0].screenshot == "t__a2/step_000.png"
    assert all((tmp_path / "mode" / s.screenshot).is_file() for s in retry.steps)


def test_environment_failure_restarts_the_attempt(sandbox_task_list, sandbox_server, browser_env):
    """The browser is killed in the middle of an attempt: the attempt starts over and says so."""
    task = task_with(sandbox_task_list, "choose_option")
    teacher = ScriptedTeacher(seed=1, imperfections=PERFECT)
    killed = []

    class KillOnce:
        name = teacher.name

        def act(self, task, observation, history, reflections):
            if len(history) == 2 and not killed:
                killed.extend(browser_env.browser_pids())
                for pid in killed:
                    os.kill(pid, signal.SIGKILL)
            return teacher.act(task, observation, history, reflections)

    trajectory = run_episode(browser_env, task, KillOnce(), SandboxJudge(sandbox_server.session_state), 30)
    assert killed and len(trajectory.metadata["env_errors"]) == 1
    assert trajectory.success is True and trajectory.termination == "stop"


def test_persistent_environment_failure_is_not_the_agents(sandbox_task_list, sandbox_server, browser_config):
    from rmsweb_kedro.episodes.rollouts import EpisodeSettings, EpisodeSpec, Roles, run_rollouts

    judge, task = SandboxJudge(sandbox_server.session_state), sandbox_task_list[0]
    broken = browser_config.model_copy(update={"executable": "/nonexistent/chromium"})
    roles = Roles(agent=lambda _seed: ScriptedTeacher(0), judge=lambda _server: judge)
    [[trajectory]] = run_rollouts(
        [EpisodeSpec(key=task.id, task=task, max_steps=10)], roles, browser=broken,
        settings=EpisodeSettings(env_retries=1), progress=None,
    )  # fmt: skip
    assert trajectory.termination == "env_error" and trajectory.success is None and trajectory.verdict is None
    errors = trajectory.metadata["env_errors"]
    assert len(errors) == 2 and "/nonexistent/chromium" in errors[0]


def collect_params(tmp_path: Path, **overrides) -> dict:
    return {
        "max_tasks": 3,
        "modes": ["single", "independent_retries", "reflection_retries"],
        "attempts": 2,
        "n_envs": 2,
        "progress": False,
        "journal_path": str(tmp_path / "journal.jsonl"),
        "raw_root": str(tmp_path / "raw"),
        "teacher": {"imperfections": ALWAYS_WRONG.model_dump()},
        **overrides,
    }


@pytest.mark.slow
def test_collect_writes_every_attempt_resumes_and_summarises(sandbox_task_list, tmp_path):
    tasks = [t for t in sandbox_task_list if t.split == "train" and t.site == "shop" and "cart" in t.id][:1]
    params = collect_params(tmp_path)
    selected = select_collection_tasks(tasks_to_frame(tasks), params)
    raw_root = Path(params["raw_root"])
    log = collect_trajectories(selected, params)
    # The always-wrong teacher fails every first attempt; only reflection retries recover, on the second.
    by_mode = {m: log.filter(pl.col("mode") == m) for m in params["modes"]}
    assert by_mode["single"]["attempt"].to_list() == [1]
    assert by_mode["independent_retries"]["success"].to_list() == [False, False]
    reflection = by_mode["reflection_retries"].sort("task_id", "attempt")
    assert reflection["success"].to_list() == [False, True]
    assert reflection["reflections_seen"].to_list() == [0, 1]

    partitions = publish_raw_trajectories(log, params)
    assert set(partitions) == set(reflection["partition"])  # only the corpus mode, failed attempts too
    for name, text in partitions.items():
        trajectory = Trajectory.model_validate_json(text)
        assert trajectory.metadata["reflections_in_training_prompt"] is False
        assert all((raw_root / name).parent.joinpath(s.screenshot).is_file() for s in trajectory.steps)
        if trajectory.success:
            assert trajectory.metadata["helpful_reflection"] == trajectory.reflections[-1]

    stats = collection_stats(log, params)
    assert stats["modes"]["reflection_retries"]["yield"] == 1.0
    assert stats["modes"]["independent_retries"]["yield"] == 0.0
    assert stats["modes"]["reflection_retries"]["yield_by_attempt"] == [0.0, 1.0]
    assert stats["modes"]["reflection_retries"]["attempts_per_success"] == 2.0
    assert plot_collection(stats).axes

    # A re-run finds every attempt in the journal and runs none.
    lines_before = Path(params["journal_path"]).read_text().count("\n")
    again = collect_trajectories(selected, params)
    assert Path(params["journal_path"]).read_text().count("\n") == lines_before
    assert again.drop("trajectory").equals(log.drop("trajectory"))


KILL_SCRIPT = """
import sys
from rmsweb_kedro.contracts.schema import tasks_to_frame
from rmsweb_kedro.web.sandbox import SandboxParams, generate_tasks
from rmsweb_kedro.pipelines.collect.nodes import collect_trajectories, select_collection_tasks
import json
params = json.loads(sys.argv[1])
tasks = select_collection_tasks(tasks_to_frame(generate_tasks(SandboxParams())), params)
collect_trajectories(tasks, params)
"""


@pytest.mark.slow
def test_kill_9_loses_only_episodes_in_flight(tmp_path):
    params = collect_params(tmp_path, max_tasks=3, modes=["single"], n_envs=1)
    journal = Path(params["journal_path"])
    process = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, json.dumps(params)], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (journal.exists() and journal.read_text().count("\n") >= 1):
            time.sleep(0.2)
        assert journal.exists(), "no attempt finished within the deadline"
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the collector and its Chromium children, mid-run
        process.wait()
    kept = Journal(journal, CollectParams(**params).fingerprint(), key=JOURNAL_KEY).load()
    assert 1 <= len(kept) < 3
    tasks = select_collection_tasks(tasks_to_frame(generate_tasks(SandboxParams())), params)
    log = collect_trajectories(tasks, params)
    assert log.height == 3
    finished = Journal(journal, CollectParams(**params).fingerprint(), key=JOURNAL_KEY).load()
    for key, entry in kept.items():  # nothing that finished before the kill was run again
        assert finished[key]["trajectory"]["id"] == entry["trajectory"]["id"]
    complete = []
    for line in journal.read_text().splitlines():
        try:
            complete.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # the episode being written when the process died
    assert len(complete) == 3  # each attempt ran exactly once


def test_the_teachers_equivalents_become_the_states_reference_set(
    sandbox_task_list, sandbox_server, browser_env
):
    """The sandbox's declared equivalent (Enter in the form's last text field = its submit button) is recorded on
    the step, carried into the state table, and the step metrics accept it as right."""
    from rmsweb_kedro.contracts.actions import parse_action
    from rmsweb_kedro.contracts.schema import STATE_SCHEMA, reference_set, step_row, trajectory_row
    from rmsweb_kedro.measures.scoring import score_step, step_score
    from rmsweb_kedro.pipelines.sft_data.nodes import build_states

    task = next(t for t in sandbox_task_list if t.metadata["template"] == "job_apply" and t.split == "train")
    judge = SandboxJudge(sandbox_server.session_state)
    trajectory = run_episode(browser_env, task, ScriptedTeacher(0, PERFECT), judge, max_steps=30)
    assert trajectory.success is True
    with_equivalents = [s for s in trajectory.steps if s.equivalent_actions]
    assert [s.equivalent_actions for s in with_equivalents] == [[parse_action('press("Enter")')]]
    assert with_equivalents[0].action.type.value == "click"
    # JSON round trip (raw files) keeps them
    assert Trajectory.model_validate_json(trajectory.model_dump_json()) == trajectory

    trajectories = pl.DataFrame([trajectory_row(trajectory, "f.jsonl")])
    steps = pl.DataFrame([step_row(trajectory, s) for s in trajectory.steps])
    states = build_states(trajectories, steps)
    assert states.schema == STATE_SCHEMA
    row = states.row(with_equivalents[0].index, named=True)
    assert row["equivalent_actions"] == ['press("Enter")']
    assert reference_set(row) == [with_equivalents[0].action, parse_action('press("Enter")')]
    assert step_score(reference_set(row), parse_action('press("Return")')).step_success
    assert not score_step(row["reference_action"], 'Action: press("Enter")').step_success


@pytest.mark.slow
def test_longer_ways_survive_shortening_and_a_reflection_rules_them_out(
    sandbox_task_list, sandbox_server, browser_env
):
    """The teacher's longer ways (type then click Search; an unnecessary Job type filter) still succeed, are not
    undone by shortening, and once a reflection names them the retry takes the reference's length."""
    from rmsweb_kedro.contracts.schema import step_row, trajectory_row
    from rmsweb_kedro.trajectories.shortening import shorten

    task = next(t for t in sandbox_task_list if t.metadata["template"] == "job_salary" and t.split == "train")
    judge = SandboxJudge(sandbox_server.session_state)
    longer = TeacherImperfections(mistake_probs={"longer_route": 1.0, "unnecessary_filter": 1.0})
    slow = run_episode(browser_env, task, ScriptedTeacher(0, longer), judge, max_steps=30)
    assert slow.success is True
    assert len(slow.steps) == len(task.reference_solution) + 2  # one step more for each longer way
    trajectories, steps = shorten(
        pl.DataFrame([trajectory_row(slow, "f.jsonl")]), pl.DataFrame([step_row(slow, s) for s in slow.steps])
    )
    assert trajectories["n_steps"].to_list() == [len(slow.steps)]  # nothing revisited: nothing to remove

    # a booking that fails on a wrong destination, after an unnecessary sort: the reflection names both, and the
    # retry that reads it avoids both where an independent retry (same imperfections) sorts twice again
    task = next(
        t for t in sandbox_task_list if t.metadata["template"] == "flight_book" and t.split == "train"
    )
    failing = TeacherImperfections(
        mistake_probs={"type_value": 1.0, "unnecessary_filter": 1.0}, self_correct_prob=0.0
    )
    failed = run_episode(browser_env, task, ScriptedTeacher(0, failing), judge, max_steps=30)
    assert failed.success is False
    reflection, _ = ScriptedReflector().reflect(task, failed.steps, failed.verdict, None)
    assert 'combobox "Sort by" (an unnecessary filter). Instead: select' in reflection
    longer = TeacherImperfections(mistake_probs={"unnecessary_filter": 1.0})
    independent = run_episode(browser_env, task, ScriptedTeacher(1, longer), judge, max_steps=30)
    retry = run_episode(browser_env, task, ScriptedTeacher(1, longer), judge, 30, [reflection], attempt=2)
    assert independent.success is True and retry.success is True
    assert len(retry.steps) == len(task.reference_solution) == len(independent.steps) - 1


@pytest.mark.slow
def test_a_wrong_item_is_worked_from_and_the_reflection_names_it(
    sandbox_task_list, sandbox_server, browser_env
):
    """A plausible wrong item opened and not left: the teacher answers what that item's page says (the answer is
    read off the page), the checker rejects it, the reflection names the pick and the retry answers right. Before
    answers were read, such an attempt answered the reference's value from the wrong page and was judged a
    success: a training state whose target was not on its page."""
    judge = SandboxJudge(sandbox_server.session_state)
    wrong_pick = TeacherImperfections(mistake_probs={"pick_item": 1.0}, self_correct_prob=0.0)
    for template in ("dine_opening", "shop_price", "job_salary"):
        task = next(t for t in sandbox_task_list if t.metadata["template"] == template and t.split == "train")
        expected = task.reference_solution[-1]["text"]
        failed = run_episode(browser_env, task, ScriptedTeacher(0, wrong_pick), judge, max_steps=30)
        last = failed.steps[-1]
        assert last.action.type.value == "answer" and last.action.text != expected, template
        # what it saw, not what it knew
        assert last.action.text in last.axtree and expected not in last.axtree
        assert last.thought == f"The page says {last.action.text}."
        assert failed.success is False and "does not match the expected" in failed.verdict.reason
        reflection, _ = ScriptedReflector().reflect(task, failed.steps, failed.verdict, None)
        assert reflection.startswith("Wrong decision: click link "), reflection
        retry = run_episode(
            browser_env, task, ScriptedTeacher(0, wrong_pick), judge, 30, [reflection], attempt=2
        )
        assert retry.success is True and retry.steps[-1].action.text == expected
        assert len(retry.steps) == len(task.reference_solution)
