"""The task suite: size, levels, splits, value design, reference format, checkers (no browser)."""

from __future__ import annotations

import polars as pl
import pytest

from rmsweb_kedro.contracts.actions import ActionType, parse_action
from rmsweb_kedro.contracts.schema import (
    TASK_SCHEMA,
    Element,
    Observation,
    Task,
    level_for_length,
    tasks_from_frame,
    tasks_to_frame,
)
from rmsweb_kedro.web.sandbox import SandboxParams, TargetNotFound, World, check, generate_tasks, resolve_step


def test_suite_size_levels_and_judges(sandbox_task_list: list[Task]) -> None:
    tasks = sandbox_task_list
    assert len(tasks) >= 300
    assert len({t.id for t in tasks}) == len(tasks)
    assert {t.level for t in tasks} == {"easy", "medium", "hard"}
    assert len({t.site for t in tasks}) >= 6
    for task in tasks:
        assert task.reference_length == len(task.reference_solution)
        assert task.level == level_for_length(task.reference_length)
        assert task.judge.kind == "sandbox_checker"
        assert task.start_url == f"http://{task.site}.sandbox.test/"
        last = task.reference_solution[-1]["action"]
        assert last == ("answer" if task.judge.config["checker"] == "answer" else "stop")


def test_generation_is_deterministic_and_round_trips_the_table(sandbox_task_list: list[Task]) -> None:
    again = generate_tasks(SandboxParams())
    assert [t.model_dump() for t in again] == [t.model_dump() for t in sandbox_task_list]
    frame = tasks_to_frame(sandbox_task_list)
    assert frame.schema == TASK_SCHEMA
    assert tasks_from_frame(frame) == sandbox_task_list


@pytest.mark.parametrize(  # the default world; the experiment's (conf/experiment/), 12 s: slow
    "instances", [24, pytest.param(160, marks=pytest.mark.slow)]
)
def test_splits_hold_out_a_site_and_unseen_combinations(instances: int) -> None:
    tasks = generate_tasks(SandboxParams(instances_per_template=instances))
    by_split = {s: [t for t in tasks if t.split == s] for s in ("train", "val", "test")}
    assert all(by_split.values())
    assert {t.site for t in tasks if t.site == "hotels"} and all(
        t.split == "test" for t in tasks if t.site == "hotels"
    )
    assert "hotels" not in {t.site for t in by_split["train"] + by_split["val"]}
    train_combos = {
        (t.metadata["template"], repr(sorted(t.metadata["params"].items()))) for t in by_split["train"]
    }
    train_words = {
        w.lower()
        for t in by_split["train"]
        for v in t.metadata["params"].values()
        for w in str(v).replace(",", " ").split()
    }
    for task in by_split["test"] + by_split["val"]:
        assert (task.metadata["template"], repr(sorted(task.metadata["params"].items()))) not in train_combos
        if task.site != "hotels":  # unseen combination of seen words
            words = {
                w.lower() for v in task.metadata["params"].values() for w in str(v).replace(",", " ").split()
            }
            assert words <= train_words, task.id


def test_experiment_split_uses_unseen_strings() -> None:
    tasks = generate_tasks(SandboxParams(split_mode="unseen_strings", instances_per_template=10))
    train_cities = {t.metadata["params"].get("city") for t in tasks if t.split == "train"} - {None}
    test_cities = {
        t.metadata["params"].get("city") for t in tasks if t.split == "test" and t.site != "hotels"
    } - {None}
    assert train_cities and test_cities and not train_cities & test_cities
    train_products = {t.metadata["params"].get("product") for t in tasks if t.split == "train"} - {None}
    test_products = {t.metadata["params"].get("product") for t in tasks if t.split != "train"} - {None}
    assert test_products and not train_products & test_products


def test_half_the_values_are_made_up_words(sandbox_task_list: list[Task]) -> None:
    world = World(0)
    for name in ("cities", "first_names", "adjectives", "companies"):
        pool = world.pools[name]
        assert sum(w in world.made_up for w in pool) == len(pool) // 2
    words = [w for t in sandbox_task_list for w in atoms_of(t)]
    made_up = sum(w.capitalize() in world.made_up for w in words)
    assert 0.2 < made_up / len(words) < 0.6


def atoms_of(task: Task) -> list[str]:
    return [
        w for v in task.metadata["params"].values() if isinstance(v, str) for w in v.split() if w.isalpha()
    ]


def test_reference_steps_have_canonical_text_and_decision_points(sandbox_task_list: list[Task]) -> None:
    labels = set()
    for task in sandbox_task_list:
        for step in task.reference_solution:
            text = step["canonical"].replace("{id}", "7")
            action = parse_action(text)
            assert action.type == ActionType(step["action"])
            assert ("target" in step) == (action.element is not None)
            for alternative in step.get("alternatives", []):
                parse_action(alternative["canonical"].replace("{id}", "3"))
            if "decision" in step:
                labels.add(step["decision"])
    assert {"pick_item", "choose_option", "type_value", "dead_end", "skip_filter"} <= labels


def test_resolve_step_finds_the_element_by_role_and_name() -> None:
    observation = Observation(
        url="http://shop.sandbox.test/search?q=x",
        elements=[
            Element(id=1, role="link", name="Shopwell"),
            Element(id=4, role="link", name="Blue scarf"),
            Element(id=5, role="button", name="Blue scarf"),
        ],
    )
    step = {
        "action": "click",
        "target": {"role": "button", "name": "blue  SCARF"},
        "canonical": "click({id})",
    }
    assert resolve_step(step, observation).element == 5
    typed = {"action": "type", "target": {"role": "link", "name": "Blue scarf"}, "text": "hi", "submit": True}
    assert str(resolve_step(typed, observation)) == 'type(4, "hi", submit=true)'
    assert str(resolve_step({"action": "answer", "text": "42 USD"}, observation)) == 'answer("42 USD")'
    with pytest.raises(TargetNotFound, match='no link named "Red scarf"'):
        resolve_step({"action": "click", "target": {"role": "link", "name": "Red scarf"}}, observation)


def test_an_answer_step_with_read_takes_its_text_from_the_page() -> None:
    from rmsweb_kedro.web.sandbox.steps import MONEY, answer

    page = Observation(
        url="http://shop.sandbox.test/product/3", axtree='heading "Green mug"\ntext "Price: 12.50 USD"'
    )
    step = answer("80.00 USD", "Price: " + MONEY)  # the reference's value; this page shows another item's
    assert step["text"] == "80.00 USD" and step["read"] == "Price: " + MONEY
    assert str(resolve_step(step, page)) == 'answer("12.50 USD")'
    with pytest.raises(TargetNotFound, match="no text matching"):
        resolve_step(step, Observation(url="http://shop.sandbox.test/cart", axtree='heading "Cart"'))
    with pytest.raises(ValueError, match="one group"):
        answer("1", r"\d+")


def wrong_value(value: str) -> str:
    return (
        value + "x"
        if not value.isdigit()
        else str(int(value) % 7 + 1)
        if value != str(int(value) % 7 + 1)
        else "99"
    )


@pytest.mark.parametrize("template", sorted({"shop_price", "shop_cart", "shop_order", "flight_book", "dine_reserve",
                                             "homes_viewing", "job_apply", "hotel_book", "recipe_compare"}))  # fmt: skip
def test_every_checker_accepts_the_goal_and_rejects_a_wrong_state(
    sandbox_task_list: list[Task], template: str
) -> None:
    task = next(t for t in sandbox_task_list if t.metadata["template"] == template)
    config = task.judge.config
    if config["checker"] == "answer":
        expected = config["expected"]
        assert check(task, {}, expected).success
        assert check(task, {}, f"  {expected.upper()}. ").success
        assert not check(task, {}, "Something else").success
        assert not check(task, {}, None).success
        return
    collection, match = config["collection"], config["match"]
    assert check(task, {collection: [dict(match, extra="ok")]}, None).success
    assert not check(task, {collection: []}, None).success
    for field in match:  # every field matters: one wrong value fails the task
        verdict = check(task, {collection: [dict(match, **{field: wrong_value(match[field])})]}, None)
        assert not verdict.success, (field, verdict)
        assert collection in verdict.reason


def test_answer_normalisation() -> None:
    task = Task(id="t", source="sandbox", site="shop", start_url="http://shop.sandbox.test/", instruction="?",
                judge={"kind": "sandbox_checker", "config": {"checker": "answer", "expected": "1,250.00 USD"}})  # fmt: skip
    assert check(task, {}, "$1250").success
    assert check(task, {}, "It costs 1,250.00 USD").success
    assert not check(task, {}, "1,350.00 USD").success
    assert not check(task, {}, "not 1250 but much more than that in the end").success


def test_summary_node_counts_every_task(sandbox_task_list: list[Task]) -> None:
    from rmsweb_kedro.pipelines.tasks.nodes import (
        generate_sandbox_tasks,
        plot_sandbox_tasks,
        summarise_sandbox_tasks,
    )

    frame = generate_sandbox_tasks({"instances_per_template": 6})
    summary = summarise_sandbox_tasks(frame)
    assert summary["tasks"].sum() == frame.height
    assert summary.filter(pl.col("site") == "hotels")["split"].unique().to_list() == ["test"]
    assert plot_sandbox_tasks(summary).axes


def test_sandbox_parameters_refuse_an_unknown_key_or_site() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="instances_per_templat"):
        SandboxParams(instances_per_templat=3)
    with pytest.raises(ValueError, match=r"\['hotel'\] are not sandbox sites"):
        generate_tasks(SandboxParams(held_out_sites=["hotel"], instances_per_template=1))
