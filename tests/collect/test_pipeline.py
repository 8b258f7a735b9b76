"""The collect pipeline's wiring against the catalog and parameters, task selection and the journal."""

from __future__ import annotations

import json
from pathlib import Path

from kedro.config import OmegaConfigLoader

from rmsweb_kedro.contracts.schema import tasks_to_frame
from rmsweb_kedro.episodes.collection import JOURNAL_KEY, CollectParams
from rmsweb_kedro.episodes.rollouts import Journal
from rmsweb_kedro.pipelines.collect.nodes import select_collection_tasks
from rmsweb_kedro.pipelines.collect.pipeline import create_pipeline
from rmsweb_kedro.settings import CONFIG_LOADER_ARGS

CONF = Path(__file__).resolve().parents[2] / "conf"


def config():
    loader = OmegaConfigLoader(
        conf_source=str(CONF),
        base_env="base",
        default_run_env="base",
        merge_strategy={"parameters": "soft"},
        custom_resolvers=CONFIG_LOADER_ARGS["custom_resolvers"],  # the project's ${merge:...}
    )
    return loader["catalog"], loader["parameters"]


def test_every_dataset_is_declared_and_parameters_validate():
    catalog, parameters = config()
    pipeline = create_pipeline()
    for name in pipeline.inputs() | pipeline.all_outputs():
        if name.startswith("params:"):
            continue
        assert name in catalog, f"{name} is not in the catalog"
    assert "raw_trajectories" in pipeline.all_outputs() and "tasks" in pipeline.inputs()
    params = CollectParams(**parameters["collect"])
    assert params.corpus_modes == ["reflection_retries"] and not params.reflections_in_training_prompt
    # the shared values (globals.yml) reach collect through its own parameters, as they reach the other stages
    assert params.raw_root == parameters["trajectories"]["raw_root"] == "data/01_raw/trajectories"
    assert params.sandbox_seed == parameters["sandbox"]["seed"]
    for name in ("collection_log", "collection_stats", "collection_plot"):
        assert catalog[name]["metadata"]["kedro-viz"]["layer"]


def test_cap_gives_every_template_the_same_share(sandbox_task_list):
    frame = tasks_to_frame(sandbox_task_list)
    train = [t for t in sandbox_task_list if t.split == "train"]
    templates = {t.metadata["template"] for t in train}
    # templates differ in how many train tasks they have (a site with more templates has more tasks)
    assert len({sum(t.metadata["template"] == name for t in train) for name in templates}) > 1
    selected = select_collection_tasks(frame, {"max_tasks": len(templates) * 2, "seed": 3})
    assert selected.height == len(templates) * 2 and set(selected["split"]) == {"train"}
    chosen = selected["metadata"].str.json_path_match("$.template")
    assert chosen.value_counts()["count"].to_list() == [2] * len(templates)
    again = select_collection_tasks(frame, {"max_tasks": len(templates) * 2, "seed": 3})
    assert again["id"].to_list() == selected["id"].to_list()


def test_journal_skips_a_torn_line_and_other_settings(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, "abc", key=JOURNAL_KEY)
    journal.append({"mode": "single", "task_id": "t1", "attempt": 1, "success": True})
    Journal(path, "other", key=JOURNAL_KEY).append(
        {"mode": "single", "task_id": "t2", "attempt": 1, "success": True}
    )
    with path.open("a") as file:
        file.write('{"mode": "single", "task_id": "t3", "att')  # killed mid-write
    assert list(journal.load()) == [("single", "t1", 1)]
    journal.append({"mode": "single", "task_id": "t3", "attempt": 1, "success": False})
    assert sorted(journal.load()) == [("single", "t1", 1), ("single", "t3", 1)]
    assert json.loads(path.read_text().splitlines()[-1])["task_id"] == "t3"
