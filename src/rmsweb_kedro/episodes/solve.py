"""Play every sandbox task's reference solution in Chromium, through the rollout engine, and check it: the test that
the sandbox's tasks are solvable as generated.

python -m rmsweb_kedro.episodes.solve --envs 2 [--limit 50] [--split test]
"""

from __future__ import annotations

import argparse
import logging
import time
from collections import Counter

from rmsweb_kedro.agents.reference import ReferenceAgent
from rmsweb_kedro.contracts.pagetree import parse_axtree
from rmsweb_kedro.episodes.rollouts import EpisodeSpec, Roles, run_rollouts
from rmsweb_kedro.judges.sandbox import SandboxJudge
from rmsweb_kedro.web.sandbox.tasks import SandboxParams, generate_tasks


def solve(envs: int, seed: int, limit: int | None, split: str | None) -> int:
    tasks = [t for t in generate_tasks(SandboxParams(seed=seed)) if split in (None, t.split)][:limit]
    started = time.perf_counter()
    results = run_rollouts(
        [EpisodeSpec(key=t.id, task=t, max_steps=len(t.reference_solution or []) + 1) for t in tasks],
        Roles(agent=lambda _seed: ReferenceAgent(), judge=lambda server: SandboxJudge(server.session_state)),
        browsers=envs,
        browser={"screenshots": False},
        sandbox_seed=seed,
        progress="reference solutions",
    )
    solved, by_template = 0, Counter()
    for task, (run,) in zip(tasks, results, strict=True):
        ok = bool(run.success)
        solved += ok
        by_template[(task.metadata["template"], ok)] += 1
        if not ok:
            error = next((s.error for s in run.steps if s.error), None)
            reason = run.verdict.reason if run.verdict else run.metadata.get("env_errors")
            print(f"FAILED {task.id}: {error or reason}")
    for template in sorted({t for t, _ in by_template}):
        print(
            f"  {template:18s} {by_template[(template, True)]}/{by_template[(template, True)] + by_template[(template, False)]}"
        )
    chars = sorted(len(s.axtree) for (run,) in results for s in run.steps)
    elements = sorted(len(parse_axtree(s.axtree)) for (run,) in results for s in run.steps)
    if chars:
        print(
            f"observations: axtree median {chars[len(chars) // 2]} chars (max {chars[-1]}), "
            f"interactive elements median {elements[len(elements) // 2]} (max {elements[-1]})"
        )
    print(
        f"{solved}/{len(tasks)} reference solutions solve their task ({time.perf_counter() - started:.0f} s, {envs} envs)"
    )
    return 0 if solved == len(tasks) else 1


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m rmsweb_kedro.episodes.solve", description=__doc__)
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--split", choices=["train", "val", "test"], default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    return solve(args.envs, args.seed, args.limit, args.split)


if __name__ == "__main__":
    raise SystemExit(main())
