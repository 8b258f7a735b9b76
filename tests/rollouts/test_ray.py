"""The ``ray`` backend on a local Ray (2 CPUs) inside a loopback-only network namespace, against the ``threads``
backend on the same seeded sandbox episodes: the same verdicts; a browser actor killed mid-episode is survived (its
episode retried as an environment error); a driver killed mid-run and restarted resumes from the journal, each
episode journaled exactly once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmsweb_kedro.rollouts import Journal, run_rollouts
from tests.fixtures_web import chromium_available
from tests.rollouts.ray_driver import FINGERPRINT, episodes, roles

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def loopback_namespace_available() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-n", "-p", "-f", "--mount-proc", "true"], capture_output=True, timeout=30
    )  # fmt: skip
    return probe.returncode == 0


def ray_command(settings: dict) -> list[str]:
    """The driver in its own network namespace with only loopback (Ray then registers 127.0.0.1 and reaches
    nothing else) and its own PID namespace (killing the driver takes its Ray processes and Chromiums along)."""
    env = (
        f"RAY_USAGE_STATS_ENABLED=0 PYTHONPATH={REPO / 'src'}:{REPO} KEDRO_DISABLE_TELEMETRY=1 "
        "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1"
    )
    script = f"ip link set lo up; {env} exec {sys.executable} -m tests.rollouts.ray_driver '{json.dumps(settings)}'"
    return ["unshare", "-n", "-p", "-f", "--mount-proc", "--kill-child", "bash", "-c", script]


@pytest.fixture(scope="module")
def task_ids(sandbox_task_list) -> list[str]:
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    if not loopback_namespace_available():
        pytest.skip(
            "`unshare -n -p` is not permitted here: a local Ray must run in a loopback-only namespace"
        )
    decisive = [  # tasks whose checker sees a wrong decision (a recorded booking, order...)
        t
        for t in sandbox_task_list
        if t.split == "train"
        and t.judge.config.get("checker") == "record"
        and any(s.get("decision") in ("choose_option", "pick_item") for s in t.reference_solution)
    ]
    short = sorted(decisive, key=lambda t: (len(t.reference_solution), t.id))
    by_site: dict[str, str] = {}
    for task in short:
        by_site.setdefault(task.site, task.id)
    return sorted(by_site.values())[:5]


def outcomes(journal: Journal) -> dict[str, tuple]:
    return {
        key: (e["success"], e["termination"], len(e["trajectory"]["steps"]))
        for (key,), e in journal.load().items()
    }


def test_ray_matches_threads_survives_a_dead_actor_and_a_killed_driver(task_ids, tmp_path):
    # The threads backend in this process: the reference verdicts.
    threads = Journal(tmp_path / "threads.jsonl", FINGERPRINT)
    run_rollouts(episodes(task_ids), roles(), {}, browsers=2, sandbox_seed=0, journal=threads, progress=None)
    expected = outcomes(threads)
    assert len(expected) == len(task_ids)
    assert {success for success, _, _ in expected.values()} == {True, False}  # the seeds give both outcomes

    # The ray backend, slowed down, its first task's actor killing itself once; the driver is killed mid-run.
    path = tmp_path / "ray.jsonl"
    settings = {"journal": str(path), "task_ids": task_ids, "browsers": 2, "delay_s": 0.4,
                "kill_marker": str(tmp_path / "killed")}  # fmt: skip
    driver = subprocess.Popen(ray_command(settings), cwd=REPO, start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and driver.poll() is None:
            keys = (
                [json.loads(line)["key"] for line in path.read_text().splitlines()] if path.exists() else []
            )
            if task_ids[0] in keys and len(keys) >= 2:
                break
            time.sleep(0.2)
        assert driver.poll() is None, "the ray driver ended before it could be killed"
        assert (tmp_path / "killed").exists(), "the actor was never killed"
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver, its local Ray and every Chromium of its namespace
        driver.wait()
    kept = Journal(path, FINGERPRINT).load()
    assert 2 <= len(kept) < len(task_ids)
    died = kept[(task_ids[0],)]["trajectory"]["metadata"]["env_errors"]
    assert len(died) == 1 and "actor died" in died[0]

    # Restarted, undelayed: it runs only what the journal lacks.
    settings |= {"delay_s": 0.0}
    assert subprocess.run(ray_command(settings), cwd=REPO, timeout=150).returncode == 0
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert sorted(e["key"] for e in lines) == sorted(task_ids)  # each episode journaled exactly once
    finished = Journal(path, FINGERPRINT).load()
    for key, entry in kept.items():
        assert finished[key] == entry
    assert outcomes(Journal(path, FINGERPRINT)) == expected
