"""The failure taxonomy on hand-made (sample, reference) pairs: one pair per rule and the precedence between rules."""

import pytest

from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.measures.mining import FailureMode, Sample, classify_failure, parse_history, score_state

A = parse_action


@pytest.mark.parametrize(
    ("sample", "reference", "previous", "expected"),
    [
        # right, spelled differently: no failure
        ('type(5, "  PARIS ")', 'type(5, "paris")', [], None),
        ('answer("$1,200.00")', 'answer("1200 USD")', [], None),
        ("press(Return)", 'press("Enter")', [], None),
        # each rule on its own
        ('answer("42")', "click(3)", [], FailureMode.PREMATURE_END),
        ('stop("success")', 'type(2, "x")', [], FailureMode.PREMATURE_END),
        ("click(3)", 'answer("42")', [], FailureMode.NEVER_STOPS),
        ('scroll("down")', 'stop("success")', [], FailureMode.NEVER_STOPS),
        ("click(4)", "click(9)", ["click(1)", "click(4)"], FailureMode.REPEATS_ITSELF),
        ("go_back()", "click(9)", [], FailureMode.OFF_TASK_NAVIGATION),
        ('goto("http://127.0.0.1:8000/shop/cart")', "click(9)", [], FailureMode.OFF_TASK_NAVIGATION),
        (
            'goto("https://evil.example/")',
            'goto("http://127.0.0.1:8000/shop")',
            [],
            FailureMode.OFF_TASK_NAVIGATION,
        ),
        ('select_option(4, "Economy")', 'type(4, "Economy")', [], FailureMode.WRONG_ACTION_TYPE),
        ("hover(4)", "click(4)", [], FailureMode.WRONG_ACTION_TYPE),
        ('answer("42")', 'stop("infeasible")', [], FailureMode.WRONG_ACTION_TYPE),
        ("click(4)", "click(5)", [], FailureMode.WRONG_ELEMENT),
        ("click(x=100, y=100)", "click(x=300, y=100)", [], FailureMode.WRONG_ELEMENT),
        ('type(5, "Paris")', 'type(6, "Paris")', [], FailureMode.WRONG_ELEMENT),
        ('type(5, "Pariss")', 'type(5, "Paris")', [], FailureMode.WRONG_ARGUMENT),
        ('type(5, "Paris")', 'type(5, "Paris", submit=true)', [], FailureMode.WRONG_ARGUMENT),
        ('select_option(7, "Business")', 'select_option(7, "Economy")', [], FailureMode.WRONG_ARGUMENT),
        (
            'goto("http://127.0.0.1:8000/a")',
            'goto("http://127.0.0.1:8000/b")',
            [],
            FailureMode.WRONG_ARGUMENT,
        ),
        ('answer("41")', 'answer("42")', [], FailureMode.WRONG_ARGUMENT),
        ('stop("failure")', 'stop("success")', [], FailureMode.WRONG_ARGUMENT),
        # precedence: never stopping beats repeating; repeating beats navigating off task and a wrong element
        ("click(4)", 'answer("42")', ["click(4)"], FailureMode.NEVER_STOPS),
        ("go_back()", "click(9)", ["go_back()"], FailureMode.REPEATS_ITSELF),
        # the same element again after another action is not a repeat with the default window of one
        ("click(4)", "click(9)", ["click(4)", "click(7)"], FailureMode.WRONG_ELEMENT),
    ],
)
def test_rules(sample, reference, previous, expected):
    assert classify_failure(A(sample), A(reference), [A(p) for p in previous]) == expected


def test_invalid_format_and_environment_error():
    assert classify_failure(None, A("click(3)")) == FailureMode.INVALID_FORMAT
    # the environment failing outranks everything, even a right action: it is not the policy's failure
    assert classify_failure(A("click(3)"), A("click(3)"), env_error=True) == FailureMode.ENVIRONMENT_ERROR


def test_goto_within_the_current_site_is_an_argument_error():
    sample, reference = (
        A('goto("http://127.0.0.1:9/flights?from=PAR")'),
        A('goto("http://127.0.0.1:9/flights")'),
    )
    assert classify_failure(sample, reference, state_url="http://127.0.0.1:9/") == FailureMode.WRONG_ARGUMENT
    off = A('goto("http://elsewhere.test/flights")')
    assert (
        classify_failure(off, reference, state_url="http://127.0.0.1:9/") == FailureMode.OFF_TASK_NAVIGATION
    )


def test_repeat_window():
    history = [A("click(4)"), A("click(7)")]
    assert (
        classify_failure(A("click(4)"), A("click(9)"), history, repeat_window=2) == FailureMode.REPEATS_ITSELF
    )
    assert (
        classify_failure(A("click(7)"), A("click(9)"), history, repeat_window=0) == FailureMode.WRONG_ELEMENT
    )


def test_every_mode_is_reachable():
    """The enum is closed and every member has a rule that produces it."""
    reached = {
        classify_failure(None, A("click(1)")),
        classify_failure(A("click(1)"), A("click(1)"), env_error=True),
        classify_failure(A('answer("x")'), A("click(1)")),
        classify_failure(A("click(1)"), A('answer("x")')),
        classify_failure(A("click(1)"), A("click(2)"), [A("click(1)")]),
        classify_failure(A("go_back()"), A("click(2)")),
        classify_failure(A("hover(2)"), A("click(2)")),
        classify_failure(A("click(1)"), A("click(2)")),
        classify_failure(A('type(2, "a")'), A('type(2, "b")')),
    }
    assert reached == set(FailureMode)


def test_parse_history_skips_unparsed_text():
    assert parse_history(["click(3)", "not an action", 'type(2, "a")']) == [A("click(3)"), A('type(2, "a")')]
    assert parse_history(None) == []


def test_score_state_competence_and_mode():
    reference = A('type(5, "Paris")')
    samples = [
        Sample(A('type(5, "paris")')),
        Sample(A('type(5, "Pari")')),
        Sample(A('type(5, "Pari")')),
        Sample(None, "no action"),
    ]
    # the greedy action is right: the failure mode is the majority wrong sample's
    score = score_state(samples, Sample(A('type(5, "Paris")')), reference)
    assert score.competence == 0.25
    assert score.step_success and score.failure_mode == FailureMode.WRONG_ARGUMENT
    assert score.sampled_actions[-1] == "<invalid: no action>"
    # a wrong greedy action decides the mode
    score = score_state(samples, Sample(A("click(5)")), reference)
    assert not score.step_success and score.failure_mode == FailureMode.WRONG_ACTION_TYPE
    assert score.greedy_action == "click(5)"
    # all right: no mode
    score = score_state([Sample(reference)] * 3, Sample(reference), reference)
    assert score.competence == 1.0 and score.failure_mode is None
    with pytest.raises(ValueError, match="at least one sample"):
        score_state([], Sample(reference), reference)
