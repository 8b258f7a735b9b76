"""The action space: one closed set of browser actions, one table that defines them, one parser, one formatter,
one equivalence.

:data:`ACTION_SPACE` holds one :class:`ActionSpec` per :class:`ActionType`: whether it takes a target, its
arguments in order (the :class:`Action` field each fills, its kind, whether it is required, its closed set of values)
and how a prompt shows it. The :class:`Action` checks, :func:`parse_action`, :func:`format_action` and both prompt
texts (the policy's in :mod:`rmsweb_kedro.contracts.prompts`, the teacher's in :mod:`rmsweb_kedro.agents.openai_roles`) are
derived from it, so adding or changing an action is one edit here.

Text form (what models read and write), one call per action::

    click(12)                      click(x=320, y=488)
    type(5, "Paris")               type(5, "Paris", submit=true)
    select_option(7, "Economy")    press("Enter")
    scroll("down")                 scroll("down", 3)
    hover(9)                       goto("https://example.org/")
    go_back()                      wait(2)
    answer("42.50 USD")            stop("success")
    memorize("The Blue scarf costs 12 EUR")

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
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

#: The largest element id, step index or attempt number: their table columns are Int32 (schema.STEP_SCHEMA,
#: TRAJECTORY_SCHEMA), and a record beyond them must be refused here, not fail the table's construction.
INT32_MAX = 2**31 - 1
#: The largest count or token number (Int64 columns, and polars' widest integer).
INT64_MAX = 2**63 - 1


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
    MEMORIZE = "memorize"


ScrollDirection = Literal["up", "down", "left", "right"]
StopStatus = Literal["success", "failure", "infeasible"]
ArgumentKind = Literal["string", "integer", "number", "flag"]


@dataclass(frozen=True)
class Argument:
    """One argument an action takes besides its target, in the order a call writes it."""

    field: str  # the Action field it fills
    kind: ArgumentKind  # string (quoted), integer, number, or flag (written name=true)
    shown: str | None  # how the policy's prompt writes it (a placeholder or an example); None: not shown
    required: bool = True
    missing: str = ""  # the parse error's words when a required argument is absent: "type needs <missing>"
    choices: tuple[str, ...] = ()  # a closed set of values, matched case-insensitively
    aliases: tuple[str, ...] = ()  # other keyword names the parser accepts, answer(answer="12")
    what: str = ""  # the value's name in type errors; "the <field>" by default

    @property
    def label(self) -> str:
        return self.what or f"the {self.field}"


@dataclass(frozen=True)
class ActionSpec:
    """One action: its target, its arguments and what it is for (the teacher's prompt says so)."""

    type: ActionType
    targeted: bool  # acts on a page element: an element id, or page coordinates x=, y=
    arguments: tuple[Argument, ...]
    purpose: str

    @property
    def argument(self) -> str | None:
        """The field of the action's one main argument (the first), or None."""
        return self.arguments[0].field if self.arguments else None

    def usage(self, target: str = "id", every_argument: bool = False) -> str:
        """The call as a prompt shows it, ``type(id, "text", submit=true)``; ``every_argument`` adds the
        arguments the policy's prompt leaves out, with an example value."""
        parts = [target] if self.targeted else []
        for argument in self.arguments:
            shown = argument.shown or (_EXAMPLES[argument.field] if every_argument else None)
            if shown is not None:
                parts.append(shown)
        return f"{self.type.value}({', '.join(parts)})"


_DIRECTIONS, _STATUSES = get_args(ScrollDirection), get_args(StopStatus)


def _either(values: tuple[str, ...]) -> str:
    """``("up", "down", "left")`` -> ``"up, down or left"``, for error messages."""
    return f"{', '.join(values[:-1])} or {values[-1]}"


_EXAMPLES = {"amount": "3"}  # values for the arguments the policy's prompt does not show

ACTION_SPACE: dict[ActionType, ActionSpec] = {
    spec.type: spec
    for spec in (
        ActionSpec(
            ActionType.CLICK,
            targeted=True,
            arguments=(),
            purpose="click the element with that id",
        ),
        ActionSpec(
            ActionType.TYPE,
            targeted=True,
            arguments=(
                Argument("text", "string", '"text"', missing="the text to type"),
                Argument("submit", "flag", "submit=true", required=False, what="submit"),
            ),
            purpose="replace the field's text; submit=true presses Enter after it (optional)",
        ),
        ActionSpec(
            ActionType.SELECT_OPTION,
            targeted=True,
            arguments=(Argument("option", "string", '"option"', missing="the option to select"),),
            purpose="choose an option of a drop-down list",
        ),
        ActionSpec(
            ActionType.PRESS,
            targeted=False,
            arguments=(Argument("key", "string", '"Enter"', missing="its key"),),
            purpose='press a key or a combination ("Enter", "Tab", "Control+a")',
        ),
        ActionSpec(
            ActionType.SCROLL,
            targeted=False,
            arguments=(
                Argument(
                    "direction",
                    "string",
                    '"down"',
                    missing=f"a direction: {_either(_DIRECTIONS)}",
                    choices=_DIRECTIONS,
                ),
                Argument("amount", "integer", None, required=False, what="the scroll amount"),
            ),
            purpose="scroll the page up, down, left or right, by a number of steps (optional)",
        ),
        ActionSpec(
            ActionType.HOVER,
            targeted=True,
            arguments=(),
            purpose="move the mouse over the element",
        ),
        ActionSpec(
            ActionType.GOTO,
            targeted=False,
            arguments=(Argument("url", "string", '"url"', missing="its url"),),
            purpose="open a URL",
        ),
        ActionSpec(
            ActionType.GO_BACK,
            targeted=False,
            arguments=(),
            purpose="go back to the previous page",
        ),
        ActionSpec(
            ActionType.WAIT,
            targeted=False,
            arguments=(Argument("seconds", "number", "2", required=False),),
            purpose="wait for the page to change, for a number of seconds (optional, 1 by default)",
        ),
        ActionSpec(
            ActionType.ANSWER,
            targeted=False,
            arguments=(Argument("text", "string", '"text"', missing="its text", aliases=("answer",)),),
            purpose="give the answer when the task asks for information, then stop",
        ),
        ActionSpec(
            ActionType.STOP,
            targeted=False,
            arguments=(Argument("status", "string", '"success"', missing="its status", choices=_STATUSES),),
            purpose='end the task: "success" (done), "failure" or "infeasible" (it cannot be done)',
        ),
        ActionSpec(
            ActionType.MEMORIZE,
            targeted=False,
            arguments=(Argument("text", "string", '"fact"', missing="the fact to remember"),),
            purpose="remember a fact for the later steps (the page is not touched; the prompt carries the fact)",
        ),
    )
}

# Actions that act on a page element, addressed by element id or by page coordinates.
TARGETED = frozenset(t for t, spec in ACTION_SPACE.items() if spec.targeted)
# The one main argument each action carries besides its target; None means no argument.
ARGUMENT_FIELD: dict[ActionType, str | None] = {t: spec.argument for t, spec in ACTION_SPACE.items()}
# Every field an argument can fill, with its value when unset.
_UNSET = {
    argument.field: (False if argument.kind == "flag" else None)
    for spec in ACTION_SPACE.values()
    for argument in spec.arguments
}


def describe_actions(target: str = "id") -> str:
    """One line per action, its full call and what it is for: the action list of an instruction prompt."""
    usages = [spec.usage(target, every_argument=True) for spec in ACTION_SPACE.values()]
    width = max(map(len, usages)) + 2
    return "\n".join(
        f"  {usage:<{width}}-- {spec.purpose}"
        for usage, spec in zip(usages, ACTION_SPACE.values(), strict=True)
    )


def memorized_facts(actions: Iterable[Action | None]) -> list[str]:
    """The facts of the ``memorize`` actions among ``actions``, oldest first: what every later step carries (the
    policy's prompt: ``prompts.PromptConfig.memory``; the teacher's)."""
    return [a.text for a in actions if a is not None and a.type == ActionType.MEMORIZE and a.text]


class ActionParseError(ValueError):
    """Model text that is not exactly one valid action; ``reason`` says why in words a person understands."""

    def __init__(self, reason: str, text: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.text = text


class Action(BaseModel):
    """One browser action. ``element`` (an id from the observation) or ``x``/``y`` (page pixels) is the target."""

    # allow_inf_nan: JSON's NaN/Infinity (and 1e400) are no page coordinate or wait
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False, allow_inf_nan=False)

    type: ActionType
    element: int | None = Field(default=None, le=INT32_MAX)
    x: float | None = None
    y: float | None = None
    text: str | None = None
    option: str | None = None
    key: str | None = None
    submit: bool = False
    direction: ScrollDirection | None = None
    amount: int | None = Field(default=None, le=INT64_MAX)
    url: str | None = None
    seconds: float | None = None
    status: StopStatus | None = None

    @model_validator(mode="after")
    def _check_arguments(self) -> Action:
        t, spec = self.type, ACTION_SPACE[self.type]
        has_point = self.x is not None or self.y is not None
        if spec.targeted:
            by_point = self.x is not None and self.y is not None
            if (self.element is not None) + by_point != 1 or (has_point and not by_point):
                raise ValueError(f"{t.value} needs exactly one target: an element id, or both x and y")
        elif self.element is not None or has_point:
            raise ValueError(f"{t.value} takes no target")
        taken = {argument.field: argument for argument in spec.arguments}
        for name, unset in _UNSET.items():
            value = getattr(self, name)
            if name not in taken and value != unset:
                raise ValueError(f"{t.value} takes no {name}")
            if name in taken and taken[name].required and value is None:
                raise ValueError(f"{t.value} needs its {name}")
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
        """The action's one main argument (text, option, key, direction, url, seconds or status), or None."""
        field = ACTION_SPACE[self.type].argument
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
    args: list[str] = []
    if action.element is not None:
        args.append(str(action.element))
    elif action.x is not None and action.y is not None:
        args += [f"x={_number(action.x)}", f"y={_number(action.y)}"]
    for argument in ACTION_SPACE[action.type].arguments:
        value = getattr(action, argument.field)
        if value is None or value is False:
            continue
        if argument.kind == "flag":
            args.append(f"{argument.field}=true")
            continue
        written = {"string": _quote, "integer": str, "number": _number}[argument.kind](value)
        # After x=, y= a positional value would not parse: name it, type(x=10, y=20, text="Paris").
        args.append(f"{argument.field}={written}" if action.x is not None else written)
    return f"{action.type.value}({', '.join(args)})"


def format_reply(thought: str | None, action: Action) -> str:
    """An assistant reply: an optional one-line thought, then the action."""
    lines = [f"Thought: {' '.join(thought.split())}"] if thought else []
    lines.append(f"Action: {format_action(action)}")
    return "\n".join(lines)


# ---------------------------------------------------------------- parsing

# Line starts match [^\S\n]* (blanks on that line), not \s*, and the name is bounded: a reply of many blank lines
# or spaces must not cost quadratic time (a served model's reply is arbitrary text).
_ACTION_LINE = re.compile(r"^[^\S\n]*action\s*:\s*(.*)$", re.IGNORECASE | re.MULTILINE)
_THOUGHT_LINE = re.compile(
    r"^[^\S\n]*thought\s*:(.*?)(?=^[^\S\n]*action\s*:|\Z)", re.IGNORECASE | re.MULTILINE | re.DOTALL
)
_CALL = re.compile(r"^\s*`*\s*([A-Za-z_][A-Za-z_ ]{0,40}?)\s*\((.*)\)\s*`*\s*\.?\s*$", re.DOTALL)
#: Longest reply parsed (about 4k tokens); an action reply is a few hundred characters.
MAX_REPLY_CHARS = 16_000
_SURROGATE = re.compile("[\ud800-\udfff]")
_BOOLEAN_WORDS = {"true": True, "false": False}
_CODE_FENCE = re.compile(r"^\s*```[A-Za-z]*[^\S\n]*\n(.*?)\n[^\S\n]*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class ReplySpans:
    """Where a reply's parts lie, as [start, end) character offsets: what :func:`parse_reply` reads and what
    Salvage-DS's anchor trains on (the action call's tokens, none of the thought's)."""

    #: the text after 'Thought:', up to the 'Action:' line (or the end); None: no thought
    thought: tuple[int, int] | None
    #: the text after each 'Action:', to the end of its line
    calls: tuple[tuple[int, int], ...]


def reply_spans(text: str) -> ReplySpans:
    """The reply grammar's one reading of ``text`` (the 'Thought:' and 'Action:' lines, module docstring)."""
    thought = _THOUGHT_LINE.search(text)
    calls = tuple(match.span(1) for match in _ACTION_LINE.finditer(text))
    return ReplySpans(thought.span(1) if thought else None, calls)


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
    except (RecursionError, MemoryError):  # e.g. thousands of nested operators
        raise ActionParseError(f"the arguments of {name}(...) nest too deeply to parse", text) from None
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


def _convert(argument: Argument, value: Any, name: str, text: str) -> Any:
    if argument.kind == "integer":
        return _as_int(value, argument.label, text)
    if argument.kind == "number":
        return _as_number(value, argument.label, text)
    if argument.kind == "flag":
        return _as_bool(value, argument.label, text)
    value = _as_str(value, argument.label, text)
    if argument.choices:
        value = value.strip().lower()
        if value not in argument.choices:
            raise ActionParseError(
                f"{name} {argument.field} must be {_either(argument.choices)}, got {value!r}", text
            )
    return value


def _build(name: str, positional: list[Any], keywords: dict[str, Any], text: str) -> Action:
    try:
        action_type = ActionType(name)
    except ValueError:
        known = ", ".join(t.value for t in ActionType)
        raise ActionParseError(f"unknown action {name!r}; known actions: {known}", text) from None
    spec = ACTION_SPACE[action_type]
    fields: dict[str, Any] = {"type": action_type}
    args = list(positional)
    if spec.targeted:
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
    for argument in spec.arguments:  # by keyword, else the next positional value, else an alias keyword
        value = (
            keywords.pop(argument.field) if argument.field in keywords else (args.pop(0) if args else None)
        )
        for alias in argument.aliases:
            value = keywords.pop(alias, None) if value is None else value
        if value is None:
            if argument.required:
                raise ActionParseError(f"{name} needs {argument.missing}", text)
            continue
        fields[argument.field] = _convert(argument, value, name, text)
    if args:
        raise ActionParseError(f"{name} got surplus arguments: {', '.join(map(repr, args))}", text)
    if keywords:
        raise ActionParseError(f"{name} got unknown arguments: {', '.join(sorted(keywords))}", text)
    try:
        return Action(**fields)
    except ValidationError as err:
        reasons = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
        raise ActionParseError(f"{name}: {reasons}", text) from None


def _unreadable(text: str) -> str | None:
    """Why ``text`` cannot be model text worth parsing (too long, a NUL, a lone surrogate), or None."""
    if len(text) > MAX_REPLY_CHARS:
        return (
            f"reply of {len(text)} characters is longer than the {MAX_REPLY_CHARS} an action reply may have"
        )
    if "\x00" in text:
        return f"reply holds a NUL character at position {text.index(chr(0))}"
    surrogate = _SURROGATE.search(text)  # e.g. from a JSON "\udcff" escape: not encodable text
    if surrogate:
        return f"reply holds a lone surrogate {surrogate.group()!r} at position {surrogate.start()}"
    return None


def parse_action(text: str) -> Action:
    """Parse one action from model text (the ``Action:`` line when there is one). Raises ActionParseError."""
    if not isinstance(text, str) or not text.strip():
        raise ActionParseError("empty model output: no action", text if isinstance(text, str) else "")
    unreadable = _unreadable(text)
    if unreadable:
        raise ActionParseError(unreadable, text)
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
    span = reply_spans(text).thought
    thought = " ".join(text[span[0] : span[1]].split()) if span else None
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
    if t == ActionType.MEMORIZE:
        return normalize_text(action.text or "")
    return None  # click, hover, go_back, wait: the target (if any) says everything


def same_target(a: Action, b: Action, tolerance_px: float = 16.0) -> bool:
    """Same element id, or points within ``tolerance_px`` of each other; untargeted actions match."""
    if a.element is not None or b.element is not None:
        return a.element == b.element
    if a.x is not None and b.x is not None:
        return abs(a.x - b.x) <= tolerance_px and abs(a.y - b.y) <= tolerance_px  # type: ignore[operator]
    return a.x is None and b.x is None


def matches_any(action: Action | None, references: Iterable[Action]) -> bool:
    """True when ``action`` does what one of ``references`` does (a state's reference set: schema.reference_set)."""
    return any(semantically_equal(action, reference) for reference in references)


def polarized_reward(
    action: Action | None,
    references: Iterable[Action],
    r_pos: float = 1.0,
    r_neg: float = -1.0,
    r_invalid: float = -1.0,
) -> float:
    """The action-semantic polarized reward of a sampled action (Salvage-DS, docs/salvage_ds.md): ``r_pos`` when it
    does what one of ``references`` does (:func:`matches_any`), ``r_neg`` for any other action, ``r_invalid`` when
    it did not parse (None); no partial credit. The defaults are ``SalvageDSParams``'."""
    if action is None:
        return r_invalid
    return r_pos if matches_any(action, references) else r_neg


def semantically_equal(a: Action | None, b: Action | None, tolerance_px: float = 16.0) -> bool:
    """True when both actions *do* the same thing: same type, same target, same normalised argument."""
    if a is None or b is None:
        return False
    return (
        a.type == b.type
        and same_target(a, b, tolerance_px)
        and normalized_argument(a) == normalized_argument(b)
    )
