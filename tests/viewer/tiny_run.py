"""A small real run of the whole recipe for the viewer's tests: the project's own configuration copied to a fresh
folder and ``kedro run`` (every stage: sandbox, collect, trajectories, sft_data, sft, mining, salvage_ds, evaluate) on a
few sandbox tasks with the tiny model, at the tightest parameters that still give every tab something to show.

``python tests/viewer/tiny_run.py DIR`` builds one by hand (the README's screenshot was taken on one)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYERS = ["01_raw", "02_intermediate", "03_primary", "04_feature", "05_model_input", "06_models", "07_model_output",
          "08_reporting"]  # fmt: skip

TINY = {
    "tracking": {"enabled": False},
    "sandbox": {"instances_per_template": 2},
    "collect": {"max_tasks": 4, "n_envs": 1, "max_steps": 14, "attempts": 2, "progress": False},
    # 3 tasks collected (one of 4 fails its 2 attempts): one to train on, one val, one dev
    "sft_data": {"val_tasks": 1, "probe_tasks": 0, "dev_tasks": 1, "min_train_tasks": 1},
    "sft": {"tiny": {"vocab_size": 512, "hidden_size": 32, "num_hidden_layers": 1, "intermediate_size": 64,
                     "head_dim": 8}, "augmentation": {"copies": 0}, "accuracy_states": 2,
            "training": {"loop": {"max_steps": 2, "batch_size": 4, "warmup_steps": 0, "eval_every": 100,
                                  "save_every": 100, "max_seconds": None}}},
    "mining": {"scoring": {"k": 2, "batch_size": 12}, "max_states_probed": 4,
               "online": {"rollouts": 1, "max_steps": 3}},
    "salvage_ds": {"loop": {"max_steps": 1, "batch_size": 2, "max_seconds": None, "progress": False, "updates_per_batch": 1},
                   "algorithm": {"group_size": 2, "max_new_tokens": 12}, "max_eval_states": 2, "eval_samples": 1,
                   "seeds": [0]},
    "evaluate": {"offline": {"max_states": 2}, "policy": {"max_new_tokens": 16},
                 "online": {"max_tasks": 2, "max_held_out_tasks": 1, "runs": 1, "max_steps": 3, "n_envs": 1}},
}  # fmt: skip


def copy_project(destination: Path) -> Path:
    """The project's pyproject and configuration (base; an empty local) in ``destination``, with empty data
    folders; the package is the installed one."""
    shutil.copy(REPO / "pyproject.toml", destination)
    (destination / "src").mkdir(exist_ok=True)
    shutil.copytree(REPO / "conf" / "base", destination / "conf" / "base")
    (destination / "conf" / "local").mkdir(parents=True, exist_ok=True)
    for layer in LAYERS:
        (destination / "data" / layer).mkdir(parents=True, exist_ok=True)
    return destination


def build(destination: Path, params: dict | None = None) -> Path:
    """``kedro run`` (the default pipeline) in a copy of the project at ``destination`` with :data:`TINY`."""
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    project = copy_project(destination)
    bootstrap_project(project)
    cwd = os.getcwd()
    os.chdir(project)
    try:
        with KedroSession.create(project_path=project, runtime_params=params or TINY) as session:
            session.run()
    finally:
        os.chdir(cwd)
    return project


if __name__ == "__main__":
    build(Path(sys.argv[1]).resolve())
