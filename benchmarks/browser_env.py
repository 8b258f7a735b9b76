"""BrowserEnv performance: step latency with a screenshot, and throughput with 1, 2 and 4 parallel envs.

    .venv/bin/python benchmarks/browser_env.py [--tasks 12] [--envs 1 2 4]

Targets (docs/sandbox.md): median step <= 150 ms; 4 envs >= 1.5x the throughput of 1 env (episodes through the
rollout engine's threads backend: benchmarks/rollouts.py compares it with Ray). The workload is the
reference solutions of sandbox tasks without ``wait`` steps (a wait is a fixed second by design), each step with
a PNG screenshot. Figures are noisy on a shared machine: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from rmsweb_kedro.agents.reference import ReferenceAgent
from rmsweb_kedro.contracts.schema import Task
from rmsweb_kedro.episodes.rollouts import EpisodeSpec, Roles, run_rollouts
from rmsweb_kedro.judges.sandbox import SandboxJudge
from rmsweb_kedro.web.browser import BrowserConfig, BrowserEnv
from rmsweb_kedro.web.sandbox import SandboxParams, SandboxServer, generate_tasks, resolve_step


def workload(count: int) -> list[Task]:
    """``count`` tasks spread over the templates, none with a wait step."""
    tasks = [
        t for t in generate_tasks(SandboxParams()) if all(s["action"] != "wait" for s in t.reference_solution)
    ]
    templates = sorted({t.metadata["template"] for t in tasks})
    by_template = {name: [t for t in tasks if t.metadata["template"] == name] for name in templates}
    return [by_template[templates[i % len(templates)]][i // len(templates)] for i in range(count)]


def play(env: BrowserEnv, task: Task, folder: str) -> list[float]:
    """Step latencies (seconds) of one reference play."""
    observation = env.reset(task, os.path.join(folder, task.id))
    latencies = []
    for step in task.reference_solution:
        action = resolve_step(step, observation)
        started = time.perf_counter()
        observation = env.step(action)
        latencies.append(time.perf_counter() - started)
        if observation.error:
            raise RuntimeError(f"{task.id}: {observation.error}")
    return latencies


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine from /proc/stat: Chromium's processes count too."""
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, stat.readline().split()[1:9])
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=12, help="episodes per throughput measurement")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    tasks = workload(args.tasks)
    with SandboxServer() as server, tempfile.TemporaryDirectory() as folder:
        config = BrowserConfig(host_resolver_rules=server.host_resolver_rules)
        with BrowserEnv(config) as env:  # warm-up, then latency over the whole workload on one env
            play(env, tasks[0], folder)
            latencies = sorted(x for task in tasks for x in play(env, task, folder))
        median = statistics.median(latencies) * 1000
        p95 = latencies[int(0.95 * (len(latencies) - 1))] * 1000
        print(f"step latency with screenshot: median {median:.0f} ms, p95 {p95:.0f} ms over {len(latencies)} steps "
              f"(target median <= 150 ms: {'met' if median <= 150 else 'NOT met'})")  # fmt: skip
        throughput = {}
        for n_envs in args.envs:
            started, (busy0, total0) = time.perf_counter(), busy_jiffies()
            results = run_rollouts(
                [EpisodeSpec(key=t.id, task=t, max_steps=len(t.reference_solution), screenshot_dir=os.path.join(
                    folder, f"{n_envs}-{t.id}")) for t in tasks],
                Roles(agent=lambda _seed: ReferenceAgent(), judge=lambda _server: SandboxJudge(server.session_state)),
                browsers=n_envs, browser=config, progress=None,
            )  # fmt: skip
            elapsed, (busy1, total1) = time.perf_counter() - started, busy_jiffies()
            busy_share = (busy1 - busy0) / max(1, total1 - total0)
            failures = [run for (run,) in results if not run.success]
            steps = sum(len(run.steps) for (run,) in results)
            throughput[n_envs] = steps / elapsed
            print(f"{n_envs} env(s): {steps} steps in {elapsed:.1f} s = {throughput[n_envs]:.2f} steps/s "
                  f"(browser start included; {len(failures)} failed episodes; CPUs {busy_share:.0%} busy)")  # fmt: skip
            if n_envs == 1:
                print(f"  one env keeps {busy_share:.0%} of the {os.cpu_count()} CPUs busy: more envs can give at "
                      f"most {1 / busy_share:.2f}x on this machine")  # fmt: skip
        if 1 in throughput:
            for n_envs, value in throughput.items():
                if n_envs != 1:
                    print(f"  {n_envs} envs vs 1 env: {value / throughput[1]:.2f}x")
    print(f"load average (1, 5, 15 min): {os.getloadavg()} on {os.cpu_count()} CPUs (shared machine)")


if __name__ == "__main__":
    main()
