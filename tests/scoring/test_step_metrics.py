"""Offline step metrics on hand-made (reference action, model reply) pairs."""

from __future__ import annotations

import pytest

from rmsweb_kedro.measures.scoring import score_step, step_metrics


@pytest.mark.parametrize(
    ("reference", "reply", "expected"),
    [
        # (valid, type_match, element_match, argument_match, success)
        ("click(12)", "Thought: the cart link\nAction: click(12)", (True, True, True, None, True)),
        ("click(12)", "click(13)", (True, True, False, None, False)),
        ("click(12)", "hover(12)", (True, False, True, None, False)),  # right element, wrong operation
        (
            'type(5, "Paris", submit=true)',
            "Action: type(5, 'paris ', submit=True)",
            (True, True, True, True, True),
        ),
        (
            'type(5, "Paris")',
            'type(5, "Paris", submit=true)',
            (True, True, True, False, False),
        ),  # submit differs
        ('type(5, "Paris")', 'type(6, "Paris")', (True, True, False, True, False)),
        ('select_option(7, "Economy")', 'type(7, "Economy")', (True, False, True, False, False)),
        ('answer("$1,200.00")', 'answer("1200 USD")', (True, True, None, True, True)),
        ('answer("42")', 'answer("43")', (True, True, None, False, False)),
        ('scroll("down")', 'scroll("down", 3)', (True, True, None, True, True)),
        ("go_back()", "go_back()", (True, True, None, None, True)),
        ('goto("https://Example.org/a/")', 'goto("example.org/a")', (True, True, None, True, True)),
        ('stop("success")', 'answer("done")', (True, False, None, False, False)),
        ("click(12)", "I would click the cart.", (False, False, False, None, False)),
        ('type(5, "Paris")', "Action: click(1)\nAction: click(2)", (False, False, False, False, False)),
        ('answer("42")', "", (False, False, None, False, False)),
        ("click(12)", None, (False, False, False, None, False)),
    ],
)
def test_score_step(reference, reply, expected):
    score = score_step(reference, reply)
    assert (
        score.valid,
        score.type_match,
        score.element_match,
        score.argument_match,
        score.step_success,
    ) == expected
    assert (score.error is None) == score.valid


def test_rates_over_a_small_batch():
    pairs = [
        ("click(3)", "Action: click(3)"),  # right
        ('type(5, "Paris")', 'type(5, "paris")'),  # right (case-folded text)
        ('type(5, "Paris")', 'type(6, "Paris")'),  # wrong element, right text
        ('select_option(2, "Blue")', 'select_option(2, "Red")'),  # right element, wrong option
        ('answer("12")', "the answer is 12"),  # invalid format
    ]
    assert step_metrics(pairs) == {
        "n_states": 5,
        "action_type_accuracy": 4 / 5,
        "element_accuracy": 3 / 4,  # over the four targeted references
        "argument_match": 2 / 4,  # over the four references with an argument (type x2, select, answer)
        "step_success_rate": 2 / 5,
        "invalid_format_rate": 1 / 5,
    }


def test_empty_input_and_bad_reference():
    assert step_metrics([]) == {
        "n_states": 0,
        "action_type_accuracy": None,
        "element_accuracy": None,
        "argument_match": None,
        "step_success_rate": None,
        "invalid_format_rate": None,
    }
    with pytest.raises(ValueError, match="reference action 'klick\\(3\\)' does not parse"):
        score_step("klick(3)", "click(3)")
