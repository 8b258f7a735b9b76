"""Ingest benchmark: synthetic raw trajectories -> validation + tables -> accounting -> shortening.

    .venv/bin/python benchmarks/ingest.py                 # 100k and 1M steps
    .venv/bin/python benchmarks/ingest.py --steps 100000  # one size

Prints steps/second per stage and the ratio of the largest run's time to the smallest's, against the target
(100k steps < 10 s; 1M within 12x the 100k run, i.e. cost per step does not grow with the corpus).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.pipelines.trajectories.nodes import (
    report_ingest,
    shorten_trajectories,
    validate_trajectories,
)

STEPS_PER_TRAJECTORY = 10
TRAJECTORIES_PER_FILE = 2_000
PARAMS = {
    "raw_root": ".",
    "suffix": ".jsonl",
    "max_axtree_chars": 1_000_000,
    "max_quarantine_raw_chars": 2_000,
    "check_screenshots": False,
}


def _tree(page: int) -> str:
    return "\n".join(
        [f'RootWebArea "Page {page}"'] + [f'  link "Item {page}-{k}" [{k}]' for k in range(1, 9)]
    )


def synthetic_files(n_steps: int, seed: int = 0) -> dict[str, bytes]:
    """JSONL files of trajectories with detours (a page revisited, a no-op scroll) and a few bad lines."""
    rng = random.Random(seed)
    trees = [_tree(page) for page in range(50)]
    # As collect writes them: Trajectory.model_dump_json, the action as its JSON object.
    texts = [
        "click(3)",
        'type(1, "blue scarf", submit=true)',
        'scroll("down")',
        'select_option(2, "M")',
        "go_back()",
    ]
    actions = [parse_action(text).model_dump(mode="json") for text in texts]
    final = parse_action('answer("24.90")').model_dump(mode="json")
    files: dict[str, bytes] = {}
    lines: list[str] = []
    n_trajectories = n_steps // STEPS_PER_TRAJECTORY
    for t in range(n_trajectories):
        pages = [rng.randrange(50) for _ in range(STEPS_PER_TRAJECTORY)]
        if rng.random() < 0.5:
            pages[4] = pages[1]  # a detour loop back to an already-seen page
        steps = [
            {
                "index": i,
                "url": f"http://127.0.0.1:8000/shop/p/{page}",
                "axtree": trees[page],
                "thought": "go on",
                "action": rng.choice(actions) if i < STEPS_PER_TRAJECTORY - 1 else final,
                "raw_output": "Thought: go on\nAction: click(3)",
                "error": "no element with id 3" if rng.random() < 0.03 else None,
            }
            for i, page in enumerate(pages)
        ]
        record = {
            "id": f"traj-{t}",
            "task_id": f"task-{t % 500}",
            "site": f"site{t % 5}",
            "instruction": "Add the blue scarf to the cart.",
            "success": rng.random() < 0.7,
            "steps": steps,
            "usage": {"prompt_tokens": 1000, "completion_tokens": 80},
            "producer": "benchmark",
        }
        lines.append(json.dumps(record))
        if len(lines) == TRAJECTORIES_PER_FILE or t == n_trajectories - 1:
            files[f"part-{len(files):05d}"] = ("\n".join(lines) + "\n").encode()
            lines = []
    return files


def run(n_steps: int) -> tuple[float, float]:
    """Wall and CPU seconds for ``n_steps`` (CPU time is the figure to trust on a shared machine)."""
    files = synthetic_files(n_steps)
    raw = {name: (lambda data=data: data) for name, data in files.items()}
    started, cpu_started = time.perf_counter(), time.process_time()
    trajectories, steps, quarantine, counts = validate_trajectories(raw, PARAMS)
    validated, cpu_validated = time.perf_counter(), time.process_time()
    report = report_ingest(trajectories, steps, quarantine, counts)
    shortened_trajectories, shortened_steps = shorten_trajectories(trajectories, steps)
    done = time.perf_counter()
    total, cpu = done - started, time.process_time() - cpu_started
    removed = steps.height - shortened_steps.height
    print(
        f"{steps.height:>9,} steps ({report['accepted']:,} trajectories, {len(files)} files): "
        f"validate+tables {validated - started:6.2f} s (CPU {cpu_validated - cpu_started:.2f} s), "
        f"accounting+shorten {done - validated:5.2f} s (CPU {time.process_time() - cpu_validated:.2f} s), "
        f"total {total:6.2f} s ({steps.height / total:>9,.0f} steps/s, CPU time {cpu:.2f} s); "
        f"shortening removed {removed:,} steps"
    )
    return total, cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--steps", type=int, nargs="+", default=[100_000, 1_000_000], help="corpus sizes in steps"
    )
    args = parser.parse_args()
    print(
        f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (timings are noisy when shared)"
    )
    times = {n: run(n) for n in sorted(args.steps)}
    smallest, largest = min(times), max(times)
    for kind, which in (("wall", 0), ("CPU", 1)):
        if smallest == 100_000:
            seconds = times[smallest][which]
            print(
                f"{kind}: 100k steps in {seconds:.2f} s (target < 10 s) -> {'met' if seconds < 10 else 'MISSED'}"
            )
        if largest != smallest:
            ratio = times[largest][which] / times[smallest][which]
            allowed = 1.2 * largest / smallest
            verdict = "met" if ratio <= allowed else "MISSED"
            print(
                f"{kind}: {largest:,} / {smallest:,} steps took {ratio:.1f}x (target <= {allowed:.0f}x) -> {verdict}"
            )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
