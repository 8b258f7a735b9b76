"""Command line: ``serve`` the sandbox for a person, or ``solve`` every reference solution in Chromium.

python -m rmsweb_kedro.web.sandbox serve --port 8765
python -m rmsweb_kedro.web.sandbox solve --envs 2 [--limit 50] [--split test]
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from collections import Counter

from rmsweb_kedro.web.sandbox.server import SandboxServer
from rmsweb_kedro.web.sandbox.tasks import SandboxParams, generate_tasks

#: An interactive element's line in an axtree: ``role "name" [id]`` (then maybe its value).
ELEMENT_LINE = re.compile(r'" \[\d+\](?: |$)', re.MULTILINE)


def serve(port: int, seed: int) -> None:
    with SandboxServer(port=port, seed=seed) as server:
        print(
            f"Sandbox on http://127.0.0.1:{server.port}/ (sites at /shop/, /flights/, ...). Ctrl-C stops it."
        )
        print(f'Chromium flag for the stable URLs: --host-resolver-rules="{server.host_resolver_rules}"')
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


def solve(envs: int, seed: int, limit: int | None, split: str | None) -> int:
    from rmsweb_kedro.agents.scripted import SandboxJudge
    from rmsweb_kedro.rollouts import EpisodeSpec, Roles, run_rollouts
    from rmsweb_kedro.web.sandbox.solve import ReferenceAgent

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
    elements = sorted(len(ELEMENT_LINE.findall(s.axtree)) for (run,) in results for s in run.steps)
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
    parser = argparse.ArgumentParser(prog="python -m rmsweb_kedro.web.sandbox")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", help="serve the sandbox sites until Ctrl-C")
    serve_cmd.add_argument("--port", type=int, default=8765)
    serve_cmd.add_argument("--seed", type=int, default=0)
    solve_cmd = commands.add_parser("solve", help="play every reference solution in Chromium and check it")
    solve_cmd.add_argument("--envs", type=int, default=2)
    solve_cmd.add_argument("--seed", type=int, default=0)
    solve_cmd.add_argument("--limit", type=int, default=None)
    solve_cmd.add_argument("--split", choices=["train", "val", "test"], default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.command == "serve":
        serve(args.port, args.seed)
        return 0
    return solve(args.envs, args.seed, args.limit, args.split)


if __name__ == "__main__":
    raise SystemExit(main())
