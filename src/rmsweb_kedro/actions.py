"""The action space: one closed set of browser actions, one parser, one formatter, one equivalence.

Text form (what models read and write), one call per action::

    click(12)                      click(x=320, y=488)
    type(5, "Paris")               type(5, "Paris", submit=true)
    select_option(7, "Economy")    press("Enter")
    scroll("down")                 scroll("down", 3)
    hover(9)                       goto("https://example.org/")
    go_back()                      wait(2)
    answer("42.50 USD")            stop("success")

A model reply may carry a thought before the action::

    Thought: the search box is [5]
    Action: type(5, "Paris", submit=true)

The parser is tolerant of layout (whitespace, single or double quotes, a bare word for a string, ``true``/``True``)
and strict about meaning: an unknown action, a missing or surplus argument, or a value of the wrong type raises
:class:`ActionParseError` with the reason. It never guesses.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from enum import StrEnum
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator


class ActionType(StrEnum):
    CLICK = "click"
    TYPE = "type"
    SELECT_OPTION = "select_option"
    PRESS = "press"
    SCROLL = "scroll"
    HOVER = "hover"
    GOTO = "goto"
    GO_BACK = "go_back"
    WAIT = "wait"
    ANSWER = "answer"
    STOP = "stop"


ScrollDirection = Literal["up", "down", "left", "right"]
StopStatus = Literal["success", "failure", "infeasible"]

# Actions that act on a page element, addressed by element id or by page coordinates.
TARGETED = frozenset({ActionType.CLICK, ActionType.TYPE, ActionType.SELECT_OPTION, ActionType.HOVER})
# The one argument each action carries besides its target; None means no argument.
ARGUMENT_FIELD: dict[ActionType, str | None] = {
    ActionType.CLICK: None,
    ActionType.TYPE: "text",
    ActionType.SELECT_OPTION: "option",
    ActionType.PRESS: "key",
    ActionType.SCROLL: "direction",
    ActionType.HOVER: None,
    ActionType.GOTO: "url",
    ActionType.GO_BACK: None,
    ActionType.WAIT: "seconds",
    ActionType.ANSWER: "text",
    ActionType.STOP: "status",
}
_ARGUMENT_FIELDS = ("text", "option", "key", "direction", "url", "seconds", "status")


class ActionParseError(ValueError):
    """Model text that is not exactly one valid action; ``reason`` says why in words a person understands."""

    def __init__(self, reason: str, text: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.text = text


class Action(BaseModel):
    """One browser action. ``element`` (an id from the observation) or ``x``/``y`` (page pixels) is the target."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    type: ActionType
    element: int | None = None
    x: float | None = None
    y: float | None = None
    text: str | None = None
    option: str | None = None
    key: str | None = None
    submit: bool = False
    direction: ScrollDirection | None = None
    amount: int | None = None
    url: str | None = None
    seconds: float | None = None
    status: StopStatus | None = None

    @model_validator(mode="after")
    def _check_arguments(self) -> Action:
        t = self.type
        has_point = self.x is not None or self.y is not None
        if t in TARGETED:
            by_point = self.x is not None and self.y is not None
            if (self.element is not None) + by_point != 1 or (has_point and not by_point):
                raise ValueError(f"{t.value} needs exactly one target: an element id, or both x and y")
        elif self.element is not None or has_point:
            raise ValueError(f"{t.value} takes no target")
        wanted = ARGUMENT_FIELD[t]
        for name in _ARGUMENT_FIELDS:
            value = getattr(self, name)
            if name == wanted and value is None and t != ActionType.WAIT:
                raise ValueError(f"{t.value} needs its {name}")
            if name != wanted and value is not None:
                raise ValueError(f"{t.value} takes no {name}")
        if self.submit and t != ActionType.TYPE:
            raise ValueError(f"{t.value} takes no submit flag")
        if self.amount is not None and t != ActionType.SCROLL:
            raise ValueError(f"{t.value} takes no amount")
        if self.element is not None and self.element < 0:
            raise ValueError("element ids are not negative")
        # An empty key or url does nothing a browser can carry out; an empty text (clearing a field) can.
        for name in ("key", "url"):
            if getattr(self, name) is not None and not getattr(self, name).strip():
                raise ValueError(f"{t.value} needs a non-empty {name}")
        if self.amount is not None and self.amount <= 0:
            raise ValueError("the scroll amount must be positive")
        if self.seconds is not None and not 0 <= self.seconds < float("inf"):
            raise ValueError("wait seconds must be a finite number >= 0")
        return self

    @property
    def argument(self) -> Any:
        """The action's one argument (text, option, key, direction, url, seconds or status), or None."""
        field = ARGUMENT_FIELD[self.type]
        return getattr(self, field) if field else None

    def __str__(self) -> str:
        return format_action(self)


# ---------------------------------------------------------------- formatting


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@lru_cache(maxsize=65_536)  # Action is immutable and hashable; a corpus repeats the same few thousand actions
def format_action(action: Action) -> str:
    """The canonical text of ``action``; ``parse_action(format_action(a)) == a`` for every valid action."""
    t = action.type
    args: list[str] = []
    if action.element is not None:
        args.append(str(action.element))
    elif action.x is not None and action.y is not None:
        args += [f"x={_number(action.x)}", f"y={_number(action.y)}"]
    if t == ActionType.SCROLL:
        args.insert(0, _quote(action.direction or "down"))
        if action.amount is not None:
            args.insert(1, str(action.amount))
    elif t == ActionType.WAIT:
        if action.seconds is not None:
            args.append(_number(action.seconds))
    else:
        value = action.argument
        if value is not None:
            # After x=, y= a positional value would not parse: name it, type(x=10, y=20, text="Paris").
            named = f"{ARGUMENT_FIELD[t]}=" if action.x is not None else ""
            args.append(named + _quote(str(value)))
    if action.submit:
        args.append("submit=true")
    return f"{t.value}({', '.join(args)})"


def format_reply(thought: str | None, action: Action) -> str:
    """An assistant reply: an optional one-line thought, then the action."""
    lines = [f"Thought: {' '.join(thought.split())}"] if thought else []
    lines.append(f"Action: {format_action(action)}")
    return "\n".join(lines)


# ---------------------------------------------------------------- parsing

_ACTION_LINE = re.compile(r"^\s*action\s*:\s*(.*)$", re.IGNORECASE | re.MULTILINE)
_THOUGHT_LINE = re.compile(
    r"^\s*thought\s*:\s*(.*?)\s*(?=^\s*action\s*:|\Z)", re.IGNORECASE | re.MULTILINE | re.DOTALL
)
_CALL = re.compile(r"^\s*`*\s*([A-Za-z_][A-Za-z_ ]*?)\s*\((.*)\)\s*`*\s*\.?\s*$", re.DOTALL)
_BOOLEAN_WORDS = {"true": True, "false": False}
_CODE_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


def _literal(node: ast.expr, text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool)):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) in (int, float)
    ):
        return -node.operand.value
    if isinstance(node, ast.Name):  # a bare word: true/false, or an unquoted string such as Enter
        return _BOOLEAN_WORDS.get(node.id.lower(), node.id)
    if isinstance(node, ast.List) and len(node.elts) == 1:  # click([12]), as ids are shown in observations
        return _literal(node.elts[0], text)
    if isinstance(node, ast.Tuple) and len(node.elts) == 2:  # click((320, 488))
        return tuple(_literal(e, text) for e in node.elts)
    raise ActionParseError(f"argument {ast.unparse(node)!r} is not a plain value", text)


def _split_call(call: str, text: str) -> tuple[str, list[Any], dict[str, Any]]:
    match = _CALL.match(call)
    if not match:
        raise ActionParseError("expected one action written as name(arguments), e.g. click(12)", text)
    name = match.group(1).strip().lower().replace(" ", "_")
    try:
        tree = ast.parse(f"_({match.group(2)})", mode="eval")
    except SyntaxError as err:
        raise ActionParseError(f"the arguments of {name}(...) do not parse: {err.msg}", text) from None
    node = tree.body
    # "click(1) or click(2)" or "click(1)(2)" match the pattern but are not one call.
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_"):
        raise ActionParseError("expected exactly one action written as name(arguments), e.g. click(12)", text)
    positional = [_literal(a, text) for a in node.args]
    keywords: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise ActionParseError("**arguments are not allowed", text)
        keywords[kw.arg.lower()] = _literal(kw.value, text)
    return name, positional, keywords


def _as_int(value: Any, what: str, text: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ActionParseError(f"{what} must be a whole number, got {value!r}", text)
    if isinstance(value, str):
        stripped = value.strip().strip("[]#")
        if not stripped.isdigit():
            raise ActionParseError(f"{what} must be a whole number, got {value!r}", text)
        return int(stripped)
    return value


def _as_number(value: Any, what: str, text: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ActionParseError(f"{what} must be a number, got {value!r}", text)
    return float(value)


def _as_str(value: Any, what: str, text: str) -> str:
    if isinstance(value, bool) or isinstance(value, tuple):
        raise ActionParseError(f"{what} must be a string, got {value!r}", text)
    return str(value)


def _as_bool(value: Any, what: str, text: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ActionParseError(f"{what} must be true or false, got {value!r}", text)


def _build(name: str, positional: list[Any], keywords: dict[str, Any], text: str) -> Action:
    try:
        action_type = ActionType(name)
    except ValueError:
        known = ", ".join(t.value for t in ActionType)
        raise ActionParseError(f"unknown action {name!r}; known actions: {known}", text) from None
    fields: dict[str, Any] = {"type": action_type}
    args = list(positional)

    def take(keyword: str) -> Any:
        if keyword in keywords:
            return keywords.pop(keyword)
        return args.pop(0) if args else None

    if action_type in TARGETED:
        if "x" in keywords or "y" in keywords:
            fields["x"] = _as_number(keywords.pop("x", None), "x", text)
            fields["y"] = _as_number(keywords.pop("y", None), "y", text)
        elif args and isinstance(args[0], tuple):
            fields["x"], fields["y"] = (_as_number(v, "a coordinate", text) for v in args.pop(0))
        else:
            raw = keywords.pop("element", keywords.pop("id", None))
            if raw is None and args:
                raw = args.pop(0)
            if raw is None:
                raise ActionParseError(f"{name} needs a target: an element id or x=, y=", text)
            fields["element"] = _as_int(raw, "the element id", text)
    if action_type == ActionType.TYPE:
        value = take("text")
        if value is None:
            raise ActionParseError("type needs the text to type", text)
        fields["text"] = _as_str(value, "the text", text)
        submit = take("submit")
        if submit is not None:
            fields["submit"] = _as_bool(submit, "submit", text)
    elif action_type == ActionType.SELECT_OPTION:
        value = take("option")
        if value is None:
            raise ActionParseError("select_option needs the option to select", text)
        fields["option"] = _as_str(value, "the option", text)
    elif action_type == ActionType.SCROLL:
        value = take("direction")
        if value is None:
            raise ActionParseError("scroll needs a direction: up, down, left or right", text)
        fields["direction"] = _as_str(value, "the direction", text).strip().lower()
        if fields["direction"] not in ("up", "down", "left", "right"):
            raise ActionParseError(
                f"scroll direction must be up, down, left or right, got {fields['direction']!r}", text
            )
        amount = take("amount")
        if amount is not None:
            fields["amount"] = _as_int(amount, "the scroll amount", text)
    elif action_type in (ActionType.PRESS, ActionType.GOTO, ActionType.ANSWER, ActionType.STOP):
        field = ARGUMENT_FIELD[action_type]
        value = take(field)
        if value is None and action_type == ActionType.ANSWER:
            value = keywords.pop("answer", None)
        if value is None:
            raise ActionParseError(f"{name} needs its {field}", text)
        value = _as_str(value, f"the {field}", text)
        if action_type == ActionType.STOP:
            value = value.strip().lower()
            if value not in ("success", "failure", "infeasible"):
                raise ActionParseError(
                    f"stop status must be success, failure or infeasible, got {value!r}", text
                )
        fields[field] = value
    elif action_type == ActionType.WAIT:
        seconds = take("seconds")
        if seconds is not None:
            fields["seconds"] = _as_number(seconds, "the seconds", text)
    if args:
        raise ActionParseError(f"{name} got surplus arguments: {', '.join(map(repr, args))}", text)
    if keywords:
        raise ActionParseError(f"{name} got unknown arguments: {', '.join(sorted(keywords))}", text)
    try:
        return Action(**fields)
    except ValidationError as err:
        reasons = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
        raise ActionParseError(f"{name}: {reasons}", text) from None


def parse_action(text: str) -> Action:
    """Parse one action from model text (the ``Action:`` line when there is one). Raises ActionParseError."""
    if not isinstance(text, str) or not text.strip():
        raise ActionParseError("empty model output: no action", text if isinstance(text, str) else "")
    lines = _ACTION_LINE.findall(text)
    if len(lines) > 1:
        raise ActionParseError("more than one 'Action:' line; exactly one action is allowed", text)
    fenced = _CODE_FENCE.match(text) if not lines else None
    call = lines[0] if lines else (fenced.group(1) if fenced else text).strip()
    if not lines and "\n" in call:
        raise ActionParseError("no 'Action:' line and the text is not a single action", text)
    try:
        return _parse_call(call)
    except ActionParseError as err:
        raise ActionParseError(err.reason, text) from None


@lru_cache(maxsize=65_536)
def _parse_call(call: str) -> Action:
    # Cached: a corpus repeats the same few thousand action texts, and Action is immutable.
    name, positional, keywords = _split_call(call, call)
    return _build(name, positional, keywords, call)


def parse_reply(text: str) -> tuple[str | None, Action]:
    """Split a model reply into (thought, action); the thought is None when absent. Raises ActionParseError."""
    action = parse_action(text)
    match = _THOUGHT_LINE.search(text or "")
    thought = " ".join(match.group(1).split()) if match else None
    return thought or None, action


# ---------------------------------------------------------------- equivalence

_SPACE = re.compile(r"\s+")
_NUMBER_NOISE = re.compile(r"(?<=\d)[,\s](?=\d{3}\b)")
_CURRENCY = re.compile(r"[$€£¥]|\b(usd|eur|gbp)\b")
# 12.50 -> 12.5 and 1200.00 -> 1200; the second group keeps what follows (a space, a unit, the end).
_TRAILING_ZEROS = re.compile(r"(\d+\.\d*?)0+(?!\d)(\D|$)")
_KEY_ALIASES = {
    "return": "enter",
    "esc": "escape",
    "del": "delete",
    "spacebar": "space",
    "pgdn": "pagedown",
    "pgup": "pageup",
    "page down": "pagedown",
    "page up": "pageup",
    "arrowdown": "down",
    "arrowup": "up",
    "arrowleft": "left",
    "arrowright": "right",
}


def normalize_text(value: str) -> str:
    """Case-folded, accent-free, single-spaced text without surrounding quotes or final punctuation."""
    value = unicodedata.normalize("NFKD", value)
    value = "".join(c for c in value if not unicodedata.combining(c)).casefold()
    value = _SPACE.sub(" ", value).strip().strip("\"'`").rstrip(".!").strip()
    return value


def normalize_answer(value: str) -> str:
    """``normalize_text`` plus number/currency clean-up: '$1,200.00' and '1200 USD' both become '1200'."""
    value = _CURRENCY.sub("", normalize_text(value))
    value = _NUMBER_NOISE.sub("", value)
    value = _TRAILING_ZEROS.sub(lambda m: m.group(1).rstrip(".") + m.group(2), value)
    return _SPACE.sub(" ", value).strip()


def normalize_key(value: str) -> str:
    """A key name as equivalence sees it: 'Return' and 'Enter' are one key, 'ArrowDown' and 'Down' another."""
    parts = [p.strip() for p in normalize_text(value).split("+")]
    return "+".join(_KEY_ALIASES.get(p, p) for p in parts)


def normalize_url(value: str) -> str:
    """Scheme-less, lower-case host, no trailing slash or fragment."""
    value = value.strip().split("#", 1)[0]
    value = re.sub(r"^[a-z]+://", "", value, flags=re.IGNORECASE)
    host, _, rest = value.partition("/")
    return (host.lower() + ("/" + rest if rest else "")).rstrip("/")


def normalized_argument(action: Action) -> Any:
    """The argument as equivalence sees it: what the action does, not how it was spelled."""
    t = action.type
    if t == ActionType.TYPE:
        return (normalize_text(action.text or ""), action.submit)
    if t == ActionType.SELECT_OPTION:
        return normalize_text(action.option or "")
    if t == ActionType.PRESS:
        return normalize_key(action.key or "")
    if t == ActionType.SCROLL:
        return action.direction
    if t == ActionType.GOTO:
        return normalize_url(action.url or "")
    if t == ActionType.ANSWER:
        return normalize_answer(action.text or "")
    if t == ActionType.STOP:
        return action.status
    return None  # click, hover, go_back, wait: the target (if any) says everything


def same_target(a: Action, b: Action, tolerance_px: float = 16.0) -> bool:
    """Same element id, or points within ``tolerance_px`` of each other; untargeted actions match."""
    if a.element is not None or b.element is not None:
        return a.element == b.element
    if a.x is not None and b.x is not None:
        return abs(a.x - b.x) <= tolerance_px and abs(a.y - b.y) <= tolerance_px  # type: ignore[operator]
    return a.x is None and b.x is None


def semantically_equal(a: Action | None, b: Action | None, tolerance_px: float = 16.0) -> bool:
    """True when both actions *do* the same thing: same type, same target, same normalised argument."""
    if a is None or b is None:
        return False
    return (
        a.type == b.type
        and same_target(a, b, tolerance_px)
        and normalized_argument(a) == normalized_argument(b)
    )
