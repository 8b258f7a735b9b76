"""Argument-swap augmentation: consistent swaps, only copied arguments, counts, and the screenshot guard."""

import polars as pl
import pytest

from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.contracts.schema import STATE_SCHEMA
from rmsweb_kedro.pipelines.sft.nodes import augment_train_states
from rmsweb_kedro.trajectories.augmentation import augment_states, copied_argument, same_shape, swap_argument
from tests.fixtures_model import make_states


def test_a_swap_replaces_the_argument_in_every_text_the_policy_reads():
    search, _, _ = make_states(n_tasks=1)[0:3]
    item = parse_action(search["reference_action"]).text
    # as if typed once before, with its thought (a past step without one stays without)
    search |= {
        "previous_actions": [search["reference_action"]] * 2,
        "previous_thoughts": [f"find {item}", None],
    }
    swapped = swap_argument(search, "Qorvel lamp")
    assert swapped["instruction"] == search["instruction"].replace(item, "Qorvel lamp")
    assert item not in swapped["instruction"] + swapped["reference_thought"] + "".join(
        swapped["previous_actions"] + swapped["previous_thoughts"][:1]
    )
    assert swapped["previous_thoughts"] == ["find Qorvel lamp", None]
    assert parse_action(swapped["reference_action"]).text == "Qorvel lamp"
    assert parse_action(swapped["reference_action"]).submit  # everything but the argument is kept
    assert swapped["previous_actions"] == ['type(1, "Qorvel lamp", submit=true)'] * 2
    assert swapped["axtree"] == search["axtree"] and swapped["screenshot"] == search["screenshot"]


def test_only_arguments_copied_from_the_task_or_page_are_swapped():
    search, open_item, add = make_states(n_tasks=1)
    assert copied_argument(search) is not None
    assert copied_argument(open_item) is None and copied_argument(add) is None  # clicks have no string
    invented = {**search, "reference_action": 'type(1, "something else")'}
    assert copied_argument(invented) is None  # not in the instruction nor on the page: nothing to copy
    with pytest.raises(ValueError, match="no argument copied"):
        swap_argument(add, "x")


def test_same_shape_keeps_case_digits_and_punctuation():
    drawn = same_shape("Oak St 12-B, 2027", __import__("random").Random(0))
    assert len(drawn) == len("Oak St 12-B, 2027") and drawn != "Oak St 12-B, 2027"
    for original, new in zip("Oak St 12-B, 2027", drawn, strict=True):
        assert (original.isupper(), original.islower(), original.isdigit()) == (
            new.isupper(),
            new.islower(),
            new.isdigit(),
        )
        if not original.isalnum():
            assert new == original


def test_augment_states_makes_copies_of_copyable_states_only_and_is_seeded():
    states = make_states(n_tasks=12)
    copyable = [s for s in states if copied_argument(s)]
    augmented = augment_states(states, copies=3, pool_share=0.5, seed=1)
    assert len(augmented) == 3 * len(copyable) == 36
    assert augment_states(states, copies=3, pool_share=0.5, seed=1) == augmented
    by_id = {s["state_id"]: s for s in states}
    sources = {"pool": 0, "fresh": 0}
    pool = {parse_action(s["reference_action"]).text for s in copyable}
    for copy in augmented:
        original = by_id[copy["state_id"].split("#swap")[0]]
        old, new = (
            parse_action(original["reference_action"]).text,
            parse_action(copy["reference_action"]).text,
        )
        assert new != old and new in copy["instruction"] and old not in copy["instruction"]
        assert new not in original["instruction"] + original["axtree"]  # never a second, conflicting source
        sources["pool" if new in pool else "fresh"] += 1
    assert sources["pool"] > 0 and sources["fresh"] > 0


def test_node_appends_copies_and_refuses_screenshot_prompts():
    frame = pl.DataFrame(make_states(n_tasks=6), schema=STATE_SCHEMA)
    params = {"training": {"loop": {"output_dir": "unused"}}, "augmentation": {"copies": 2}}
    out = augment_train_states(frame, params)
    assert out.schema == frame.schema and out.height == frame.height + 2 * 6
    assert out.head(frame.height).equals(frame)  # the genuine states come first, untouched
    off = augment_train_states(frame, {**params, "augmentation": {"copies": 0}})
    assert off.equals(frame)
    screenshots = {
        **params,
        "training": {**params["training"], "prompt": {"observation": ["screenshot", "axtree"]}},
    }
    with pytest.raises(ValueError, match="screenshot"):
        augment_train_states(frame, screenshots)
