"""Page times of the viewer on a synthetic run of 100,000 evaluation episodes (1,000,000 steps).

Builds a project folder (this project's conf, synthetic ``online_episodes`` and ``online_steps`` in the catalog's
files, one real screenshot per step of the episodes opened), starts the viewer as users do (uvicorn, loopback) and
times each page over HTTP, the best of ``--repeat`` loads. Peer, in the same run: reading the two tables eagerly
(``pl.read_parquet``), what each page would cost before it drew anything if the viewer loaded tables whole.

    PYTHONPATH=src .venv/bin/python benchmarks/viewer.py [--episodes 100000] [--steps 10] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import shutil
import socket
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import polars as pl

REPO = Path(__file__).resolve().parents[1]
MODELS = ["base", "sft", "rmsweb"]
SITES = ["shop", "jobs", "dine", "flights", "hotels"]
TERMINATIONS = ["answer", "stop", "max_steps", "model_error", "env_error", "blocked", "judge_error"]


def build(root: Path, n_episodes: int, n_steps: int, seed: int = 0) -> Path:
    """A project folder holding a synthetic evaluation of ``n_episodes`` episodes of ``n_steps`` steps."""
    from PIL import Image

    from rmsweb_kedro.contracts.schema import EPISODE_STEP_SCHEMA
    from rmsweb_kedro.measures.evaluation import EPISODE_SCHEMA

    shutil.copytree(REPO / "conf" / "base", root / "conf" / "base")
    (root / "conf" / "local").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", root)
    out = root / "data/07_model_output/evaluate"
    out.mkdir(parents=True)
    rng = random.Random(seed)
    n_tasks = n_episodes // len(MODELS)
    episodes = []
    for model in MODELS:
        for t in range(n_tasks):
            termination = rng.choice(TERMINATIONS)
            judged = termination not in ("env_error", "blocked", "judge_error")
            success = (rng.random() < 0.4) if judged else None
            episodes.append({
                "model": model, "run": 0, "task_id": f"task-{t:06d}", "site": SITES[t % len(SITES)],
                "level": "easy", "split": "test" if t % 2 else "val", "held_out": t % len(SITES) == 4,
                "success": success, "termination": termination, "n_steps": n_steps, "prompt_tokens": 900,
                "completion_tokens": 20, "cost_usd": 0.0, "wall_s": 3.0, "judge": "sandbox-checker/v1",
                "judged_by": None, "judge_reason": "synthetic", "diverged_at": None if success else rng.randrange(n_steps),
                "divergence_action": None, "divergence_reference": None,
                "divergence_mode": None if success else rng.choice(["wrong_element", "wrong_argument", "premature_end"]),
                "divergence_argument": None,
            })  # fmt: skip
    pl.DataFrame(episodes, schema=EPISODE_SCHEMA).write_parquet(out / "online_episodes.parquet")
    tree = "\n".join(f'link "item {i}" [{i}]' for i in range(20))  # ~300 characters a page
    frames = []
    for model in MODELS:
        ids = pl.int_range(n_tasks * n_steps, eager=True)
        task = (ids // n_steps).cast(pl.String).str.zfill(6)
        index = (ids % n_steps).cast(pl.Int32)
        frames.append(
            pl.DataFrame({"task": task, "index": index}).select(
                trajectory_id=pl.lit(f"evaluate__{model}__r0__task-") + pl.col("task"),
                task_id=pl.lit("task-") + pl.col("task"),
                index=pl.col("index"),
                url=pl.lit("http://shop.sandbox.test/search"),
                screenshot=pl.lit(f"{model}/r0/task-") + pl.col("task") + "/step_" + pl.col("index").cast(pl.String).str.zfill(3) + ".png",
                axtree=pl.lit(tree),
                thought=pl.lit("open the item the task names"),
                action=pl.lit("click(4)"),
                action_type=pl.lit("click"),
                element=pl.lit(4, pl.Int32),
                raw_output=pl.lit("click(4)"),
                error=pl.lit(None, pl.String),
                equivalent_actions=pl.lit([], pl.List(pl.String)),
                target_box=pl.lit([40.0, 120.0, 200.0, 24.0]),
                model=pl.lit(model),
                run=pl.lit(0, pl.Int32),
            )
        )  # fmt: skip
    pl.concat(frames).cast(dict(EPISODE_STEP_SCHEMA)).write_parquet(
        out / "online_steps.parquet", row_group_size=100_000
    )
    image = Image.new("RGB", (1280, 800), "white")
    for model in MODELS:  # the screenshots of the task the benchmark opens
        folder = out / "episodes" / model / "r0" / "task-000007"
        folder.mkdir(parents=True)
        for i in range(n_steps):
            image.save(folder / f"step_{i:03d}.png")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import uvicorn

    from rmsweb_kedro.viewer.app import create_app
    from rmsweb_kedro.viewer.run import Run

    with tempfile.TemporaryDirectory(prefix="viewer-bench-") as folder:
        started = time.perf_counter()
        project = build(Path(folder), args.episodes, args.steps)
        steps_file = project / "data/07_model_output/evaluate/online_steps.parquet"
        episodes_file = project / "data/07_model_output/evaluate/online_episodes.parquet"
        print(f"built {args.episodes:,} episodes, {pl.scan_parquet(steps_file).select(pl.len()).collect().item():,} "
              f"steps in {time.perf_counter() - started:.1f} s (tables {episodes_file.stat().st_size / 1e6:.1f} MB + "
              f"{steps_file.stat().st_size / 1e6:.1f} MB)")  # fmt: skip
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(create_app(Run(project)), host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        episode = {"stage": "evaluate", "model": "sft", "run": 0, "task": "task-000007"}
        pages = {
            "evaluation, first page": "/evaluation",
            "evaluation, A succeeds B fails": "/evaluation?" + urlencode({"a": "rmsweb", "b": "sft", "pair": "a_only"}),
            "evaluation, filtered + page 40": "/evaluation?" + urlencode({"site": "jobs", "termination": "blocked", "page": 40}),
            "one task, 3 models side by side": "/evaluation/task?task=task-000007&run=0",
            "one episode, step 5": "/episode?" + urlencode(episode | {"step": 5}),
            "one screenshot": "/file?root=evaluate&path=sft/r0/task-000007/step_005.png",
            "export one episode": "/export?" + urlencode(episode),
        }  # fmt: skip

        def best(call) -> float:
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            return min(times)

        peer = best(lambda: (pl.read_parquet(episodes_file), pl.read_parquet(steps_file)))
        print(f"peer: eager read of online_episodes + online_steps: {peer * 1000:.0f} ms")
        for label, path in pages.items():

            def load(path: str = path) -> None:
                with urllib.request.urlopen(base + path, timeout=60) as response:
                    assert response.status == 200, path
                    response.read()

            load()  # first load: the page's code and the file's metadata
            took = best(load)
            print(f"{label:36s} {took * 1000:7.0f} ms   ({took / peer:.2f} x the eager read)")
        server.should_exit = True
        thread.join(timeout=10)


if __name__ == "__main__":
    main()
