"""The ``ray`` backend on a local Ray (2 CPUs) inside a loopback-only network namespace, against the ``threads``
backend on the same seeded sandbox episodes: the same verdicts; a browser actor killed mid-episode is survived (its
episode retried as an environment error); a driver killed mid-run and restarted resumes from the journal, each
episode journaled exactly once; a page that freezes its renderer ends its episode as an environment error while the
others succeed, and leaves no Chromium behind.

And a two-node cluster (head + worker, 1 CPU each, joined with Ray's token authentication as the README says) in
two network namespaces joined only by a veth pair: the worker node killed mid-episode with no spare CPU left, the run
finishes on the head, each episode journaled once, its screenshots complete under the driver's raw root; then an
episode past its hard limit, and a run that no live node can place, both end."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rmsweb_kedro.episodes.rollouts import Journal, run_rollouts
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


def test_a_frozen_page_on_ray_ends_its_episode_and_leaves_no_chromium(task_ids, tmp_path):
    result = tmp_path / "frozen.json"
    assert subprocess.run(ray_command({"frozen": str(result)}), cwd=REPO, timeout=300).returncode == 0
    ran = json.loads(result.read_text())
    frozen, *calm = ran["episodes"]
    assert (frozen["termination"], frozen["success"]) == ("env_error", None)
    assert len(frozen["env_errors"]) == 2 and all("the page froze" in e for e in frozen["env_errors"])
    assert [(e["termination"], e["success"]) for e in calm] == [("answer", True)] * 2
    assert ran["chromium_left"] == []
    print(
        f"ray: the frozen page's episode took {frozen['wall_s']:.1f} s (2 tries), the run {ran['run_s']:.1f} s"
    )


def veth_namespaces_available() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-n", "-p", "-f", "--mount-proc", "ip", "link", "add", "rayh", "type", "veth", "peer", "name", "rayw"],
        capture_output=True, timeout=30,
    )  # fmt: skip
    return probe.returncode == 0


HEAD, WORKER = "10.200.0.1", "10.200.0.2"  # inside the test's namespaces only, on the veth pair between them


def cluster_command(tmp: Path, sessions: str, settings: dict) -> list[str]:
    """A head node (with the driver) and a worker node, each in its own network and PID namespace, joined by a veth
    pair and nothing else; the worker joins with the head's token (``RAY_AUTH_TOKEN``, its HOME holds none) and
    runs in another working folder than the driver. ``sessions``: Ray's folders (a short path: Ray's socket paths
    must stay under 108 bytes)."""
    ray = Path(sys.executable).parent / "ray"
    for name in ("head-home", "worker-home", "worker-cwd", "driver", "busy"):
        (tmp / name).mkdir()
    worker = (
        f"until ip link show rayw >/dev/null 2>&1; do sleep 0.05; done; ip link set lo up; "
        f"ip addr add {WORKER}/24 dev rayw; ip link set rayw up; cd {tmp}/worker-cwd; "
        f"HOME={tmp}/worker-home RAY_AUTH_TOKEN=$(cat {tmp}/token) exec {ray} start --address {HEAD}:6379 "
        f"--node-ip-address {WORKER} --num-cpus 1 --temp-dir {sessions}/w --block >{tmp}/worker.log 2>&1"
    )
    script = f"""set -e
export RAY_USAGE_STATS_ENABLED=0 HOME={tmp}/head-home PYTHONPATH={REPO / "src"}:{REPO} KEDRO_DISABLE_TELEMETRY=1 \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
ip link set lo up
ip addr add {HEAD}/32 dev lo  # not on the veth: a dead worker node takes the whole pair along
ip link add rayh type veth peer name rayw
ip link set rayh up
ip route add {WORKER}/32 dev rayh
{ray} get-auth-token --generate >{tmp}/token 2>/dev/null
export RAY_AUTH_MODE=token
{ray} start --head --node-ip-address {HEAD} --port 6379 --num-cpus 1 --include-dashboard false \
  --temp-dir {sessions}/h >{tmp}/head.log 2>&1
unshare -n -p -f --mount-proc --kill-child bash -c '{worker}' &
echo $! >{tmp}/worker.pid
until [ "$(readlink /proc/$!/ns/net)" != "$(readlink /proc/self/ns/net)" ]; do sleep 0.05; done
ip link set rayw netns $!
cd {tmp}/driver
exec {sys.executable} -m tests.rollouts.ray_driver '{json.dumps(settings)}'
"""
    return ["unshare", "-n", "-p", "-f", "--mount-proc", "--kill-child", "bash", "-c", script]


def test_a_node_killed_with_no_spare_cpu_ends_the_run_on_the_survivor(task_ids, tmp_path):
    if not veth_namespaces_available():
        pytest.skip(
            "creating network namespaces joined by a veth pair is not permitted here (needs CAP_NET_ADMIN)"
        )
    journal = tmp_path / "journal.jsonl"
    settings = {"address": f"{HEAD}:6379", "nodes": 2, "journal": str(journal), "task_ids": task_ids,
                "browsers": 2, "delay_s": 0.3, "raw_root": "raw", "busy_dir": str(tmp_path / "busy"),
                "kill_node": [WORKER, str(tmp_path / "worker.pid")], "result": str(tmp_path / "result.json")}  # fmt: skip
    sessions = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    cluster = subprocess.Popen(
        cluster_command(tmp_path, sessions, settings), cwd=REPO, start_new_session=True
    )
    try:
        returncode = cluster.wait(timeout=240)  # a run waiting on an actor that cannot be placed never ends
    finally:
        with contextlib.suppress(ProcessLookupError):  # both nodes, the driver and every Chromium in them
            os.killpg(cluster.pid, signal.SIGKILL)
        cluster.wait()
        shutil.rmtree(sessions, ignore_errors=True)
    assert returncode == 0, (tmp_path / "head.log").read_text()[-2000:]
    result = json.loads((tmp_path / "result.json").read_text())
    killed_task = (tmp_path / "busy" / WORKER).read_text()
    print(f"node killed -> run ended in {result['ended_at'] - result['killed_at']:.1f} s")

    lines = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    assert sorted(e["key"] for e in lines) == sorted(task_ids)  # each episode journaled exactly once
    for position, entry in enumerate(sorted(lines, key=lambda e: task_ids.index(e["key"]))):
        trajectory = entry["trajectory"]
        assert entry["success"] is (position % 2 == 0)  # the seeds' outcomes, as on one machine (see WRONG)
        errors = trajectory["metadata"].get("env_errors", [])
        assert len(errors) == (entry["key"] == killed_task)
        folder = tmp_path / "driver" / "raw" / entry["key"]  # screenshots: where the driver said, complete
        shots = [step["screenshot"] for step in trajectory["steps"]]
        assert shots and all(shot.startswith(f"{entry['key']}/step_") for shot in shots)
        written = {path.name for path in folder.iterdir()}  # a step without a new page reuses the last shot
        assert (
            {Path(shot).name for shot in shots}
            <= written
            <= {f"step_{i:03d}.png" for i in range(len(shots) + 1)}
        )
    (died,) = next(e for e in lines if e["key"] == killed_task)["trajectory"]["metadata"]["env_errors"]
    assert "actor died" in died
    assert not list((tmp_path / "worker-cwd").rglob("*.png"))  # nothing in the worker node's working folder

    # an agent that hangs: its actor killed at the hard limit, the episode an environment error, its files removed
    assert result["hung"]["termination"] == "env_error" and not result["hung"]["files_left"]
    assert result["hung"]["env_errors"] == ["the episode ran past its hard limit of 2 s"]

    # no live node has the 2 CPUs a browser then asks for: the run stops and says what is missing
    assert "needs 2 CPU (rollouts.cpus_per_browser)" in result["unplaceable"]
    assert "1 live node(s) have 1 of 1 CPU free" in result["unplaceable"]
    assert "ZeroDivisionError: a judge that cannot be built" in result["unbuildable"]
