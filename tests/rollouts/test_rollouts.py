"""The rollout engine on the threads backend in the real sandbox (real server, real Chromium): critical points stop
a live-mode episode before it places an order, the wall-time limit ends a slow episode, an episode whose code
raises fails the run only after the others were journaled, and a re-run resumes (screenshots where the driver's
relative paths say); the shared config validates."""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl
import pytest
import yaml

from rmsweb_kedro.agents.scripted import ScriptedTeacher, TeacherImperfections
from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.contracts.schema import Element, Observation, trajectory_row
from rmsweb_kedro.episodes.critical import CriticalPoints
from rmsweb_kedro.episodes.rollouts import (
    EpisodeSettings,
    EpisodeSpec,
    Journal,
    Roles,
    RolloutConfig,
    RolloutError,
    run_rollouts,
)
from rmsweb_kedro.judges.sandbox import SandboxJudge
from rmsweb_kedro.measures.evaluation import EPISODE_SCHEMA
from rmsweb_kedro.pipelines.live.nodes import LIVE_RESULT_SCHEMA_EXTRA, LiveParams, summarize_live
from tests.fixtures_web import chromium_available

REPO = Path(__file__).resolve().parents[2]
PERFECT = TeacherImperfections(mistake_probs={}, self_correct_prob=0.0)


def sandbox_roles(agent=None) -> Roles:
    return Roles(
        agent=agent or (lambda seed: ScriptedTeacher(seed, PERFECT)),
        judge=lambda server: SandboxJudge(server.session_state),
    )


@pytest.fixture(scope="module")
def needs_chromium() -> None:
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")


def test_the_shared_config_blocks_validate():
    rollouts = yaml.safe_load((REPO / "conf/base/parameters_rollouts.yml").read_text())["rollouts"]
    assert RolloutConfig.model_validate(rollouts) == RolloutConfig()  # the YAML states the defaults
    live = yaml.safe_load((REPO / "conf/base/parameters_live.yml").read_text())["live"]
    assert LiveParams.model_validate(live) == LiveParams()
    with pytest.raises(ValueError, match="backend"):
        RolloutConfig.model_validate({"backend": "dask"})


def page(*elements: Element) -> Observation:
    return Observation(url="http://shop.example/checkout", elements=list(elements))


def test_critical_points_on_hand_made_pages():
    critical = CriticalPoints()
    order = Element(id=3, role="button", name="Place order", bbox=(100, 200, 80, 20))
    search = Element(id=1, role="textbox", name="Search products")
    card = Element(id=2, role="textbox", name="Card number")
    assert "Place order" in critical(Action(type=ActionType.CLICK, element=3), page(search, order))
    assert "Place order" in critical(Action(type=ActionType.CLICK, x=120, y=210), page(search, order))
    assert critical(Action(type=ActionType.CLICK, x=20, y=20), page(search, order)) is None
    submit_search = Action(type=ActionType.TYPE, element=1, text="scarf", submit=True)
    assert critical(submit_search, page(search)) is None  # a search is no commitment
    assert "personal data" in critical(submit_search, page(search, card))
    assert critical(Action(type=ActionType.PRESS, key="Enter"), page(search, order)) is not None
    assert (
        critical(Action(type=ActionType.TYPE, element=2, text="4111"), page(card)) is None
    )  # typing is not submitting
    assert (
        critical(
            Action(type=ActionType.CLICK, element=3), page(Element(id=3, role="link", name="Booking tips"))
        )
        is None
    )
    assert CriticalPoints(enabled=False)(Action(type=ActionType.CLICK, element=3), page(order)) is None


@pytest.mark.slow
def test_live_mode_stops_at_the_checkout_and_reports_it_apart(needs_chromium, sandbox_task_list, tmp_path):
    task = next(t for t in sandbox_task_list if t.metadata["template"] == "shop_order")
    specs = [
        EpisodeSpec(key=name, task=task, max_steps=30, trajectory_id=f"{name}__{task.id}")
        for name in ("guarded", "unguarded")
    ]
    (guarded,), = run_rollouts(
        specs[:1], sandbox_roles(), settings=EpisodeSettings(critical=CriticalPoints()), sandbox_seed=0,
        progress=None,
    )  # fmt: skip
    ((unguarded,),) = run_rollouts(specs[1:], sandbox_roles(), sandbox_seed=0, progress=None)
    # Unguarded, the perfect teacher places the order; guarded, it stops before the click, which is recorded.
    assert unguarded.success is True and unguarded.steps[-2].action.type == ActionType.CLICK
    assert guarded.termination == "critical_point" and guarded.success is False
    assert len(guarded.steps) == len(unguarded.steps) - 1
    assert guarded.steps[-1].action == unguarded.steps[-2].action
    assert 'button "Place order"' in guarded.metadata["critical_point"]

    extra = {"model": "teacher", "run": 0, "level": task.level, "split": task.split, "held_out": True}
    rows = [
        trajectory_row(t)
        | extra
        | {"benchmark": "sandbox", "judge_prompt_source": t.verdict.judged_by.prompt_source}
        for t in (guarded, unguarded)
    ]
    summary = summarize_live(pl.DataFrame(rows, schema={**EPISODE_SCHEMA, **LIVE_RESULT_SCHEMA_EXTRA}), {})
    assert summary.select("episodes", "env_errors", "critical_points").row(0) == (2, 0, 1)


class Slow:
    """The perfect teacher, pausing before each decision."""

    name = "slow"

    def __init__(self, seed: int):
        self.inner = ScriptedTeacher(seed, PERFECT)

    def act(self, task, observation, history, reflections):
        time.sleep(0.6)  # longer than the limit below: one decision fits, not two
        return self.inner.act(task, observation, history, reflections)


class Broken:
    name = "broken"

    def act(self, task, observation, history, reflections):
        raise ZeroDivisionError("a bug in the agent")


@pytest.mark.slow
def test_time_limit_failure_and_resume(needs_chromium, sandbox_task_list, tmp_path, monkeypatch):
    tasks = sorted(
        (t for t in sandbox_task_list if t.split == "train"), key=lambda t: len(t.reference_solution)
    )
    short, other = tasks[0], tasks[1]
    (timed,), = run_rollouts(
        [EpisodeSpec(key="slow", task=short, max_steps=20)], sandbox_roles(Slow), {"episode_time_limit_s": 0.5},
        sandbox_seed=0, progress=None,
    )  # fmt: skip
    assert timed.termination == "time_limit" and len(timed.steps) == 1
    assert timed.verdict is not None and timed.success is False  # judged, as a step budget would be

    journal = Journal(tmp_path / "journal.jsonl", "test")
    monkeypatch.chdir(tmp_path)  # screenshot folders relative to the driver's folder, as collect gives them
    specs = [
        EpisodeSpec(key=t.id, task=t, max_steps=20, screenshot_dir=f"raw/{t.id}", relative_to="raw")
        for t in (short, other)
    ]

    def agent(seed: int):
        return Broken() if seed == 1 else ScriptedTeacher(seed, PERFECT)

    specs[1].seed = 1
    with pytest.raises(RolloutError, match=f"1 episode.*{other.id}.*ZeroDivisionError"):
        run_rollouts(specs, sandbox_roles(agent), browsers=2, sandbox_seed=0, journal=journal, progress=None)
    assert list(journal.load()) == [(short.id,)]  # the healthy episode was kept
    specs[1].seed = 2
    results = run_rollouts(specs, sandbox_roles(agent), sandbox_seed=0, journal=journal, progress=None)
    assert [t.success for (t,) in results] == [True, True]
    assert results[0][0].steps[0].screenshot == f"{short.id}/step_000.png"
    assert all((tmp_path / "raw" / step.screenshot).is_file() for (t,) in results for step in t.steps)
    assert len((tmp_path / "journal.jsonl").read_text().splitlines()) == 2  # the first was not run again
