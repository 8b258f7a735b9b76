"""The action space: parser tolerance and strictness, round trips, semantic equivalence."""

import re

import pytest
from pydantic import ValidationError

from rmsweb_kedro.contracts.actions import (
    ACTION_SPACE,
    ARGUMENT_FIELD,
    TARGETED,
    Action,
    ActionParseError,
    ActionType,
    ReplySpans,
    format_action,
    format_reply,
    normalize_answer,
    normalize_text,
    normalize_url,
    parse_action,
    parse_reply,
    reply_spans,
    semantically_equal,
)

# One action of every type, plus the variants of each (coordinates, submit, amount, no seconds).
EVERY_ACTION = [
    Action(type="click", element=12),
    Action(type="click", x=320, y=488.5),
    Action(type="type", element=5, text="Paris"),
    Action(type="type", element=5, text='say "hi"\nthen \\ leave', submit=True),
    Action(type="type", x=10, y=20, text=""),
    Action(type="select_option", element=7, option="Economy"),
    Action(type="press", key="Enter"),
    Action(type="scroll", direction="down"),
    Action(type="scroll", direction="left", amount=3),
    Action(type="hover", element=9),
    Action(type="goto", url="https://example.org/a?b=1#c"),
    Action(type="go_back"),
    Action(type="wait"),
    Action(type="wait", seconds=1.5),
    Action(type="answer", text="42.50 USD"),
    Action(type="stop", status="infeasible"),
    Action(type="memorize", text="The Blue scarf costs 12 EUR"),
]


def test_every_action_type_is_covered():
    assert {a.type for a in EVERY_ACTION} == set(ActionType)


@pytest.mark.parametrize("action", EVERY_ACTION, ids=format_action)
def test_format_then_parse_round_trips(action):
    text = format_action(action)
    assert parse_action(text) == action
    assert parse_action(f"Action: {text}") == action
    thought, parsed = parse_reply(format_reply("I see  the\nbox", action))
    assert (thought, parsed) == ("I see the box", action)


def test_canonical_texts():
    assert [format_action(a) for a in EVERY_ACTION[:4]] == [
        "click(12)",
        "click(x=320, y=488.5)",
        'type(5, "Paris")',
        'type(5, "say \\"hi\\"\\nthen \\\\ leave", submit=true)',
    ]
    assert format_action(Action(type="scroll", direction="left", amount=3)) == 'scroll("left", 3)'
    assert str(Action(type="go_back")) == "go_back()"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("  click( 12 )  ", Action(type="click", element=12)),
        ("CLICK(12)", Action(type="click", element=12)),
        ("click([12])", Action(type="click", element=12)),
        ('click("[12]")', Action(type="click", element=12)),
        ("click(element=12)", Action(type="click", element=12)),
        ("click((320, 488))", Action(type="click", x=320, y=488)),
        ("`click(12)`.", Action(type="click", element=12)),
        ("```python\nclick(12)\n```", Action(type="click", element=12)),
        ("type(5, 'Paris', True)", Action(type="type", element=5, text="Paris", submit=True)),
        ("type(5, text='Paris', submit=1)", Action(type="type", element=5, text="Paris", submit=True)),
        ("select option(7, Economy)", Action(type="select_option", element=7, option="Economy")),
        ("press(Enter)", Action(type="press", key="Enter")),
        ("scroll(DOWN, amount=2)", Action(type="scroll", direction="down", amount=2)),
        ("stop(Success)", Action(type="stop", status="success")),
        ("answer(answer='12')", Action(type="answer", text="12")),
        ("answer(42)", Action(type="answer", text="42")),
        ("wait()", Action(type="wait")),
        ("Thought: scroll first\n\nAction:   scroll('up')\n", Action(type="scroll", direction="up")),
    ],
)
def test_parser_is_tolerant_of_layout(text, expected):
    assert parse_action(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty model output"),
        ("   ", "empty model output"),
        ("clack(12)", "unknown action 'clack'"),
        ("I would click the button", "expected one action"),
        ("click(12) then click(13)", "do not parse"),
        ("click(1) or click(2)", "exactly one action"),
        ("click(1)(2)", "exactly one action"),
        ("Action: click(1)\nAction: click(2)", "more than one 'Action:' line"),
        ("click(12)\nclick(13)", "not a single action"),
        ("click()", "click needs a target"),
        ("click(12, 13)", "surplus arguments"),
        ("click(12, x=1, y=2)", "surplus arguments"),
        ("click(x=3)", "y must be a number"),
        ("click(1.5)", "element id must be a whole number"),
        ("click(-1)", "element ids are not negative"),
        ("click(True)", "whole number"),
        ("click(ok)", "whole number"),
        ('click(-"a")', "not a plain value"),
        ("click(foo())", "not a plain value"),
        ("click(12, force=true)", "unknown arguments: force"),
        ("click(**x)", "not allowed"),
        ("type(5)", "type needs the text"),
        ("type(5, 'a', submit='maybe')", "submit must be true or false"),
        ("type(5, (1, 2))", "must be a string"),
        ("select_option(7)", "needs the option"),
        ("press()", "press needs its key"),
        ("press('')", "non-empty key"),
        ("scroll()", "scroll needs a direction"),
        ("scroll(sideways)", "scroll direction must be"),
        ("scroll(down, 0)", "amount must be positive"),
        ("scroll(down, 'lots')", "whole number"),
        ("hover(9, 'x')", "surplus arguments"),
        ("goto()", "goto needs its url"),
        ("goto('  ')", "non-empty url"),
        ("go_back(3)", "surplus arguments"),
        ("wait(-1)", "seconds must be a finite number"),
        ("wait('soon')", "must be a number"),
        ("answer()", "answer needs its text"),
        ("memorize()", "memorize needs the fact to remember"),
        ("memorize(3, 'x')", "surplus arguments"),
        ("stop(done)", "stop status must be"),
        ("click(12", "expected one action"),
        ("click(12,,)", "do not parse"),
    ],
)
def test_parser_is_strict_about_meaning(text, reason):
    with pytest.raises(ActionParseError) as caught:
        parse_action(text)
    assert reason in caught.value.reason
    assert caught.value.text == text


def test_parse_error_keeps_the_whole_text_even_when_cached():
    text = "Thought: hmm\nAction: clack(3)"
    for _ in range(2):
        with pytest.raises(ActionParseError) as caught:
            parse_action(text)
        assert caught.value.text == text


def test_parse_reply_without_thought():
    assert parse_reply("click(3)") == (None, Action(type="click", element=3))
    assert parse_reply("Thought:\nAction: click(3)") == (None, Action(type="click", element=3))


def test_reply_spans_are_what_parse_reply_reads():
    """The reply grammar's one home: the thought and each action call as character spans (Salvage-DS's anchor
    masks the call's tokens by them)."""
    text = '  Thought:  the box\n is [5] \nAction:  type(5, "Paris")  '
    spans = reply_spans(text)
    assert text[spans.thought[0] : spans.thought[1]] == "  the box\n is [5] \n"  # up to the Action line
    assert [text[a:b] for a, b in spans.calls] == ['type(5, "Paris")  ']  # to the end of its line
    assert parse_reply(text) == ("the box is [5]", parse_action('type(5, "Paris")'))
    assert reply_spans("click(3)") == ReplySpans(None, ())  # a bare call has no 'Action:' line
    assert len(reply_spans("Action: click(1)\nACTION : click(2)").calls) == 2


@pytest.mark.parametrize(
    "fields",
    [
        {"type": "click"},
        {"type": "click", "element": 1, "x": 3},
        {"type": "click", "element": 1, "x": 3, "y": 4},
        {"type": "click", "x": 3},
        {"type": "go_back", "element": 1},
        {"type": "press", "key": "Enter", "text": "x"},
        {"type": "type", "element": 1, "text": "x", "amount": 2},
        {"type": "click", "element": 1, "submit": True},
        {"type": "scroll", "direction": "diagonal"},
        {"type": "stop", "status": "done"},
        {"type": "jump"},
        {"type": "click", "element": 1, "colour": "red"},
    ],
)
def test_action_model_rejects_inconsistent_fields(fields):
    with pytest.raises(ValidationError):
        Action(**fields)


def test_actions_are_immutable_and_hashable():
    action = Action(type="click", element=1)
    with pytest.raises(ValidationError):
        action.element = 2
    assert len({action, Action(type="click", element=1)}) == 1


def test_normalisers():
    assert normalize_text('  "Café   Crème." ') == "cafe creme"
    assert normalize_answer("$1,200.00") == normalize_answer("1200 USD") == "1200"
    assert normalize_answer("12.50 €") == normalize_answer("12.5") == "12.5"
    assert normalize_answer("10.05") == "10.05"
    assert normalize_answer("LY 208") == "ly 208"
    assert (
        normalize_url("HTTPS://Example.ORG/Path/#top")
        == normalize_url("example.org/Path")
        == "example.org/Path"
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ('type(5, "  new YORK ")', 'type(5, "New York")'),
        ('type(5, "Paris", submit=true)', "type([5], 'paris', True)"),
        ("select_option(7, 'economy')", 'select_option(7, "Economy")'),
        ('press("Return")', "press(Enter)"),
        ("press(Esc)", "press(Escape)"),
        ('press("Ctrl+Return")', 'press("ctrl + Enter")'),
        ("scroll(down)", "scroll(down, 5)"),
        ('goto("https://shop.test/cart/")', 'goto("http://SHOP.test/cart#items")'),
        ('answer("$1,200.00")', 'answer("1200 usd")'),
        ("stop(success)", "stop(SUCCESS)"),
        ("click(x=100, y=100)", "click(x=110, y=92)"),
        ("wait(1)", "wait(3)"),
        ("go_back()", "go_back()"),
        ('memorize("The soup has 120 calories.")', "memorize('the soup has  120 calories')"),
    ],
)
def test_semantically_equal(a, b):
    assert semantically_equal(parse_action(a), parse_action(b))
    assert semantically_equal(parse_action(b), parse_action(a))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("click(5)", "click(6)"),
        ("click(5)", "hover(5)"),
        ("click(5)", "click(x=5, y=5)"),
        ("click(x=100, y=100)", "click(x=120, y=100)"),
        ('type(5, "Paris")', 'type(5, "Paris", submit=true)'),
        ('type(5, "Paris")', 'type(6, "Paris")'),
        ('type(5, "Paris")', 'type(5, "Pariss")'),
        ("press(Enter)", "press(Tab)"),
        ("scroll(down)", "scroll(up)"),
        ('goto("https://shop.test/cart")', 'goto("https://shop.test/cart?x=1")'),
        ('answer("12.5")', 'answer("125")'),
        ("stop(success)", "stop(failure)"),
        ('memorize("soup: 120")', 'memorize("soup: 210")'),
    ],
)
def test_semantically_different(a, b):
    assert not semantically_equal(parse_action(a), parse_action(b))


def test_semantically_equal_with_missing_action_is_false():
    assert not semantically_equal(None, parse_action("click(1)"))
    assert not semantically_equal(None, None)


def test_pixel_tolerance_is_a_parameter():
    a, b = parse_action("click(x=100, y=100)"), parse_action("click(x=130, y=100)")
    assert not semantically_equal(a, b)
    assert semantically_equal(a, b, tolerance_px=30)


# The student's system turn is a training input: the trained tiny model has read exactly this text. Changing it
# (even a space) changes every prompt the policy sees, so it is pinned byte for byte.
STUDENT_ACTION_SPACE_TEXT = (
    "You are a web agent. Reply with 'Thought:' and one 'Action:' line.\n"
    'Actions: click(id) type(id, "text", submit=true) select_option(id, "option") press("Enter") '
    'scroll("down") hover(id) goto("url") go_back() wait(2) answer("text") stop("success")'
)


def test_student_action_space_text_is_pinned():
    """Without memory the text is the one the default checkpoints were trained on; memory adds its one action."""
    from rmsweb_kedro.contracts.prompts import action_space_text

    assert action_space_text() == STUDENT_ACTION_SPACE_TEXT
    assert action_space_text(memory=True) == STUDENT_ACTION_SPACE_TEXT + ' memorize("fact")'


def test_memorized_facts_are_the_memorize_actions_texts_in_order():
    from rmsweb_kedro.contracts.actions import memorized_facts

    actions = [parse_action(t) for t in ('memorize("a: 1")', "click(3)", 'answer("x")', 'memorize("b: 2")')]
    assert memorized_facts([*actions, None]) == ["a: 1", "b: 2"]


def _calls(prompt: str) -> dict[str, str]:
    """``{name: call}`` for every ``name(...)`` call a prompt text shows."""
    return {m.group(1): m.group(0) for m in re.finditer(r"\b([a-z_]+)\((?:[^()\"]|\"[^\"]*\")*\)", prompt)}


@pytest.mark.parametrize("prompt", ["student", "teacher"])
def test_prompt_texts_name_every_action_with_its_arguments(prompt):
    from rmsweb_kedro.agents.openai_roles import TEACHER_SYSTEM
    from rmsweb_kedro.contracts.prompts import action_space_text

    text = action_space_text(memory=True) if prompt == "student" else TEACHER_SYSTEM
    calls = _calls(text)
    for spec in ACTION_SPACE.values():
        # The call the prompt shows must be a valid action of this type, once the placeholder id is an id.
        assert spec.type.value in calls, f"the {prompt} prompt does not name {spec.type.value}"
        action = parse_action(re.sub(r"\bid\b", "1", calls[spec.type.value]))
        assert action.type == spec.type
        assert (action.element is not None) == spec.targeted
        shown = {a.field for a in spec.arguments if a.required or a.shown or prompt == "teacher"}
        for argument in spec.arguments:
            is_set = getattr(action, argument.field) not in (None, False)
            assert is_set == (argument.field in shown), (prompt, spec.type.value, argument.field)
    if prompt == "teacher":  # and says what each is for
        for spec in ACTION_SPACE.values():
            assert spec.purpose in text


def test_the_table_covers_the_action_model():
    assert set(ACTION_SPACE) == set(ActionType)
    argument_fields = {a.field for spec in ACTION_SPACE.values() for a in spec.arguments}
    assert argument_fields | {"type", "element", "x", "y"} == set(Action.model_fields)
    assert TARGETED == {ActionType.CLICK, ActionType.TYPE, ActionType.SELECT_OPTION, ActionType.HOVER}
    assert ARGUMENT_FIELD[ActionType.TYPE] == "text" and ARGUMENT_FIELD[ActionType.GO_BACK] is None
