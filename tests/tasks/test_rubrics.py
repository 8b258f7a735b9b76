"""A task's rubric has one home (``tasks.rubrics``): the three producers (a task file, WebTailBench, the proposer)
carry it through :func:`rubric_config`, whose ``total_points`` is the sum of the items' ``max_points``."""

import ast
import inspect
import json

import pytest

import rmsweb_kedro.tasks.rubrics as rubrics
from rmsweb_kedro.tasks import proposer
from rmsweb_kedro.tasks.benchmarks.loaders import load_webtailbench
from rmsweb_kedro.tasks.files import load_task_file
from rmsweb_kedro.tasks.rubrics import normalise_rubric, rubric_config
from tests.evaluate.conftest import FIXTURES


def _rubric_entries(config: dict) -> dict:
    return {key: config[key] for key in ("rubric", "total_points", "rubric_rule") if key in config}


def test_the_three_producers_carry_their_rubric_through_the_one_config(tmp_path):
    row = {"task_name": "Which two Lisbon hotels have a pool?", "website": "hotels.example", "task_id": 1,
           "evaluator_reference": [{"id": "g1", "description": "river", "facts": ["names two hotels", "pools"]},
                                   {"criterion": "Cites the page", "max_points": 2.5}]}  # fmt: skip
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    from_file = load_task_file({"path": str(path), "shape": "webgym"}).tasks[0].judge.config
    from_benchmark = load_webtailbench(FIXTURES / "webtailbench.jsonl").tasks[0].judge.config
    proposed = proposer._task(
        {"instruction": "List the categories", "rubric": ["names every category", " ", "nothing else"]},
        "https://shop.example/", "model", "digest",
    ).judge.config  # fmt: skip

    for config, every_fact in ((from_file, True), (from_benchmark, False), (proposed, False)):
        assert _rubric_entries(config) == rubric_config(config["rubric"], every_fact)
        assert config["total_points"] == sum(item["max_points"] for item in config["rubric"])
    assert from_file["total_points"] == 4.5 and list(from_file)[-3:] == [
        "rubric",
        "total_points",
        "rubric_rule",
    ]
    assert from_benchmark["total_points"] == 8.0
    assert proposed["total_points"] == float(len(proposed["rubric"])) == 2.0


def test_normalising_keeps_its_messages():
    assert normalise_rubric("  ") is None and normalise_rubric([]) is None
    assert normalise_rubric('["a", {"description": "b", "difficulty": 2}]') == [
        {"criterion": "a", "description": "", "max_points": 1.0},
        {"criterion": "b", "description": "", "max_points": 1.0},
    ]
    with pytest.raises(ValueError, match="max_points must be > 0, got 0.0"):
        normalise_rubric([{"criterion": "c", "max_points": 0}])
    with pytest.raises(ValueError, match="a criterion must be a text or an object"):
        normalise_rubric([3])
    with pytest.raises(ValueError, match="expected a list of criteria, got int"):
        normalise_rubric(3)


def test_the_rubric_module_imports_nothing_above_contracts():
    tree = ast.parse(inspect.getsource(rubrics))
    project = [
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rmsweb_kedro")
    ] + [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("rmsweb_kedro")
    ]
    assert all(name.startswith("rmsweb_kedro.contracts") for name in project), project
