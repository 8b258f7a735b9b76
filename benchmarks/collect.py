"""Collection throughput: verified trajectories per minute with 1, 2 and 4 parallel browsers.

The same train tasks, mode and teacher seeds for every setting (a fresh journal each), so every setting collects
the same trajectories and only the parallelism differs. The peer is the 1-browser run of the same invocation.

    .venv/bin/python benchmarks/collect.py --tasks 12 --envs 1 2 4
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from rmsweb_kedro.contracts.schema import tasks_to_frame
from rmsweb_kedro.pipelines.collect.nodes import collect_trajectories, select_collection_tasks
from rmsweb_kedro.web.sandbox import SandboxParams, generate_tasks


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--mode", default="reflection_retries")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    frame = tasks_to_frame(generate_tasks(SandboxParams()))
    print(f"{'browsers':>8} {'attempts':>8} {'verified':>8} {'wall s':>8} {'verified/min':>12} {'vs 1':>6}")
    baseline = None
    for n_envs in args.envs:
        with tempfile.TemporaryDirectory(prefix="bench-collect-") as folder:
            params = {
                "max_tasks": args.tasks,
                "modes": [args.mode],
                "n_envs": n_envs,
                "progress": False,
                "journal_path": str(Path(folder) / "journal.jsonl"),
                "raw_root": str(Path(folder) / "raw"),
            }
            tasks = select_collection_tasks(frame, params)
            start = time.perf_counter()
            log = collect_trajectories(tasks, params)
            wall = time.perf_counter() - start
        verified = int(log["success"].fill_null(False).sum())
        rate = verified / wall * 60
        baseline = baseline or rate
        print(
            f"{n_envs:>8} {log.height:>8} {verified:>8} {wall:>8.1f} {rate:>12.2f} {rate / baseline:>5.2f}x"
        )


if __name__ == "__main__":
    main()
