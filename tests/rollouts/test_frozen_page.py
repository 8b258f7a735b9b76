"""A page that freezes its renderer (``setTimeout(() => { while (true) {} }, 300)``) hangs no run: the browser's
watchdog kills the frozen Chromium, the episode ends ``env_error`` (never the agent's failure) after its retries,
the other episodes of the run succeed, and no Chromium is left behind; on the threads backend here and on Ray
(tests/rollouts/test_ray.py). An agent that stops answering is given up at the hard limit on the threads backend
too, and a driver that fails mid-run does not wait forever for its busy threads."""

from __future__ import annotations

import threading
import time

import pytest

from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.episodes import rollouts
from rmsweb_kedro.episodes.rollouts import (
    EpisodeSettings,
    Journal,
    Roles,
    RolloutConfig,
    hard_limit_s,
    run_rollouts,
)
from tests.fixtures_web import chromium_available
from tests.rollouts.frozen_site import Scroller, Site, chromium_descendants, episodes, roles, title_judge

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def site():
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    served = Site()
    yield served
    served.stop()


def wait_for_no_chromium(seconds: float = 30.0) -> list[int]:
    """Chromium processes of this process still alive after up to ``seconds`` (a killed one takes a moment)."""
    deadline = time.monotonic() + seconds
    while (left := chromium_descendants()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.mark.slow
def test_a_frozen_page_ends_its_episode_as_an_environment_error_and_the_run_goes_on(site):
    started = time.monotonic()
    results = run_rollouts(
        episodes(calm=2), roles(), {}, browsers=2, browser=site.browser(), progress=None,
        settings=EpisodeSettings(env_retries=1),
    )  # fmt: skip
    took = time.monotonic() - started
    (frozen,), *calm = results
    assert (frozen.termination, frozen.success, frozen.verdict) == ("env_error", None, None)
    errors = frozen.metadata["env_errors"]
    assert len(errors) == 2 and all("the page froze" in error for error in errors)  # tried, retried once
    assert [(run.termination, run.success) for (run,) in calm] == [("answer", True)] * 2
    assert not wait_for_no_chromium()
    print(f"frozen page: its episode took {frozen.metadata['wall_s']:.1f} s (2 tries), the run {took:.1f} s")


class Silent(Scroller):
    """Scrolls, then stops answering (a model server that hangs) until ``release`` is set."""

    release = threading.Event()

    def act(self, task, observation, history, reflections) -> Decision:
        if history and task.site == "frozen.test":
            self.release.wait(120)
            return Decision(action=Action(type=ActionType.STOP, status="released"))
        return super().act(task, observation, history, reflections)


@pytest.mark.slow
def test_an_agent_that_stops_answering_is_given_up_at_the_hard_limit_on_threads(site):
    specs = episodes(calm=1)
    specs[0].task = specs[1].task.model_copy(update={"id": "silent", "site": "frozen.test"})  # a calm page
    try:
        results = run_rollouts(
            specs, Roles(agent=Silent, judge=title_judge), {"episode_hard_limit_s": 10.0}, browsers=2,
            browser=site.browser(), settings=EpisodeSettings(env_retries=0), progress=None,
        )  # fmt: skip
    finally:
        Silent.release.set()  # the given-up thread then ends and closes its browser
    (silent,), (calm,) = results
    assert (silent.termination, silent.success) == ("env_error", None)
    assert silent.metadata["env_errors"] == ["the episode ran past its hard limit of 10 s"]
    assert (calm.termination, calm.success) == ("answer", True)
    assert not wait_for_no_chromium()


@pytest.mark.slow
def test_a_driver_that_fails_mid_run_does_not_wait_forever_for_a_busy_thread(
    site, tmp_path, monkeypatch, caplog
):
    # The journal cannot be written (its folder is a file): the driver fails at the first finished episode while
    # the silent agent's episode is in flight; closing waits CLOSE_TIMEOUT_S for it, kills its browser, and returns.
    monkeypatch.setattr(rollouts, "CLOSE_TIMEOUT_S", 2.0)
    (tmp_path / "file").write_text("")
    specs = episodes(calm=1)
    specs[0].task = specs[1].task.model_copy(update={"id": "silent", "site": "frozen.test"})
    Silent.release = threading.Event()
    try:
        with pytest.raises(OSError):
            run_rollouts(
                specs, Roles(agent=Silent, judge=title_judge), {}, browsers=2, browser=site.browser(),
                journal=Journal(tmp_path / "file" / "journal.jsonl", "test"), progress=None,
            )  # fmt: skip
    finally:
        Silent.release.set()
    assert "1 browser thread(s) still busy after 2 s were left" in caplog.text
    assert not wait_for_no_chromium()


def test_the_hard_limit_counts_every_try_judging_and_reflecting():
    config = RolloutConfig()
    assert hard_limit_s(config, EpisodeSettings()) == 1800.0  # no time limit: episode_hard_limit_s
    # t = 300, G = 120: (2 env retries + 1 block retry + 1) x (300 + 120) + 2 x 120
    assert hard_limit_s(config, EpisodeSettings(time_limit_s=300.0)) == 4 * 420 + 240 == 1920.0
    assert hard_limit_s(config, EpisodeSettings(time_limit_s=300.0, env_retries=0, block_retries=0)) == 660.0
