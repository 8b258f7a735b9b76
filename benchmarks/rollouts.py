"""Rollout throughput: episodes/s of the ``threads`` and ``ray`` backends at 1, 2 and 4 browsers on the sandbox.

    .venv/bin/python benchmarks/rollouts.py [--tasks 12] [--browsers 1 2 4]

Target (issue 13): Ray costs <= 10 % at equal browsers (ray / threads episodes/s >= 0.90). The workload is the
reference solutions of sandbox tasks without ``wait`` steps (``solve.ReferenceAgent``), judged by the sandbox
checker, screenshots on; each figure includes starting the browsers (threads) or the browser actors (ray), not
starting Ray itself (one local Ray serves every measurement); the mean wall time of one episode once its browser
runs is printed beside it (the steady-state cost, without process and browser starts). The script re-runs itself inside a network namespace
that has only loopback (``unshare -n``, as root) with Ray's usage statistics off, as every local Ray here must.
Figures are noisy on a shared machine: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from browser_env import workload  # the same episodes (this script's folder is on the path when it runs)

from rmsweb_kedro.agents.reference import ReferenceAgent
from rmsweb_kedro.contracts.schema import Task
from rmsweb_kedro.episodes.rollouts import EpisodeSpec, Roles, RolloutConfig, run_rollouts
from rmsweb_kedro.judges.sandbox import SandboxJudge

INSIDE = "RMSWEB_LOOPBACK_NAMESPACE"


def measure(tasks: list[Task], backend: str, browsers: int, folder: str) -> tuple[float, float]:
    """Episodes per second of one run of every task, browser (actor) start included, and the mean wall time of one
    episode once its browser runs (all must be solved, or the figures mean nothing)."""
    config = RolloutConfig(backend=backend, cpus_per_browser=(os.cpu_count() or 2) / browsers)
    specs = [
        EpisodeSpec(key=t.id, task=t, max_steps=len(t.reference_solution),
                    screenshot_dir=os.path.join(folder, f"{backend}-{browsers}-{t.id}"))
        for t in tasks
    ]  # fmt: skip
    roles = Roles(
        agent=lambda _seed: ReferenceAgent(), judge=lambda server: SandboxJudge(server.session_state)
    )
    started = time.perf_counter()
    results = run_rollouts(specs, roles, config, browsers=browsers, sandbox_seed=0, progress=None)
    elapsed = time.perf_counter() - started
    unsolved = [run.task_id for (run,) in results if not run.success]
    if unsolved:
        raise RuntimeError(f"{backend} x{browsers}: reference solutions failed on {unsolved}")
    return len(tasks) / elapsed, statistics.fmean(run.metadata["wall_s"] for (run,) in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=12, help="episodes per measurement")
    parser.add_argument("--browsers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    if os.environ.get(INSIDE) != "1":
        if shutil.which("unshare") is None:
            raise SystemExit(
                "benchmarks/rollouts.py needs `unshare` (util-linux) to run Ray on loopback only"
            )
        inner = " ".join([sys.executable, *map(repr, sys.argv)])
        script = f"ip link set lo up; {INSIDE}=1 RAY_USAGE_STATS_ENABLED=0 exec {inner}"
        os.execvp(
            "unshare", ["unshare", "-n", "-p", "-f", "--mount-proc", "--kill-child", "bash", "-c", script]
        )
    import ray

    ray.init(num_cpus=os.cpu_count(), object_store_memory=100 * 2**20, include_dashboard=False)
    tasks = workload(args.tasks)
    figures: dict[tuple[str, int], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for browsers in args.browsers:
            for backend in ("threads", "ray"):
                rate, episode_s = figures[backend, browsers] = measure(tasks, backend, browsers, folder)
                print(f"{backend:7s} {browsers} browser(s): {rate:.3f} episodes/s ({len(tasks)} episodes, starts "
                      f"included); one episode {episode_s:.2f} s once its browser runs", flush=True)  # fmt: skip
    ray.shutdown()
    for browsers in args.browsers:
        (ray_rate, ray_s), (threads_rate, threads_s) = figures["ray", browsers], figures["threads", browsers]
        ratio = ray_rate / threads_rate
        print(f"{browsers} browser(s): ray / threads = {ratio:.2f} (target >= 0.90: "
              f"{'met' if ratio >= 0.9 else 'NOT met'}); per-episode time ray / threads = {ray_s / threads_s:.2f}")  # fmt: skip
    print(f"load average (1, 5, 15 min): {os.getloadavg()} on {os.cpu_count()} CPUs (shared machine)")


if __name__ == "__main__":
    main()
