"""The embedded default's roles: a scripted sandbox teacher, a scripted reflector and the programmatic judge.

The teacher follows the task's reference solution (see docs/sandbox.md) but, seeded, takes detours (``dead_end``:
wanders into a wrong page and comes back) and makes mistakes at decision points (``pick_item``,
``choose_option``, ``type_value``, ``skip_filter``), sometimes noticing and fixing them; a mistake it does not fix
is worked from (after opening a plausible wrong item it answers what that item's page says). It also takes longer ways
that still succeed and that removing detours cannot undo, because they never revisit a page: ``longer_route``
(types a search, then clicks the button, where Enter would have submitted it) and ``unnecessary_filter`` (applies a
filter or sort the task does not need before the step that does). The reflector names the wrong decisions of a
failed attempt, first one first, and what to do instead, in plain sentences, saying of a longer way that it was one;
the teacher reads those sentences and does not repeat a mistake they name, nor, once a reflection has called one
of its steps a longer route or an unnecessary filter, take any way of that kind again. So reflection retries
succeed in fewer steps than independent retries of the same tasks. Nothing here reads the server's hidden state
except the judge, which is the task's checker.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.contracts.actions import Action, ActionType, format_reply, normalize_text
from rmsweb_kedro.contracts.pagetree import parse_axtree
from rmsweb_kedro.contracts.schema import Observation, Step, Task, Usage, Verdict
from rmsweb_kedro.contracts.seeding import seeded_rng

DETOUR = "dead_end"
SKIP = "skip_filter"
#: The longer ways a reference step may offer (``tasks.longer``) and how a reflection calls one.
LONGER_WAYS = {"longer_route": "a longer route", "unnecessary_filter": "an unnecessary filter"}


class TeacherImperfections(BaseModel):
    """How often the scripted teacher errs. ``mistake_probs``: per decision label, the chance of taking a wrong
    alternative there; ``self_correct_prob``: the chance it notices a (non-detour) mistake at once and undoes it;
    detours (``dead_end``) are always undone."""

    model_config = ConfigDict(extra="forbid")

    mistake_probs: dict[str, float] = Field(
        default_factory=lambda: {
            "pick_item": 0.3,
            "choose_option": 0.3,
            "type_value": 0.3,
            SKIP: 0.3,
            DETOUR: 0.3,
            "longer_route": 0.3,
            "unnecessary_filter": 0.3,
        }
    )
    self_correct_prob: float = Field(default=0.25, ge=0, le=1)


# ---------------------------------------------------------------- describing decisions in words


def describe(
    action_type: str, role: str | None, name: str | None, argument: Any = None, submit: bool = False
) -> str:
    """A decision in the words reflections use: 'select "L" in combobox "Size"', 'click link "Help"'."""
    target = f'{role} "{name}"'
    if action_type == "click":
        return f"click {target}"
    if action_type == "type":
        return f'type "{argument}" into {target}' + (" and press Enter" if submit else "")
    if action_type == "select_option":
        return f'select "{argument}" in {target}'
    if action_type == "hover":
        return f"hover {target}"
    return f"{action_type} {argument}" if argument is not None else action_type


def describe_reference(step: dict[str, Any]) -> str:
    """The words for a reference-solution step (docs/sandbox.md format)."""
    target = step.get("target") or {}
    argument = step.get(
        "text", step.get("option", step.get("key", step.get("direction", step.get("status"))))
    )
    return describe(
        step["action"], target.get("role"), target.get("name"), argument, step.get("submit", False)
    )


def describe_taken(step: Step) -> str | None:
    """The words for an executed step, its target looked up in the step's own accessibility tree."""
    action = step.action
    if action is None:
        return None
    if action.element is None:
        return describe(action.type.value, None, None, action.argument)
    for element in parse_axtree(step.axtree or ""):
        if element.id == action.element:
            return describe(action.type.value, element.role, element.name, action.argument, action.submit)
    return None


def _mentions(text: str, phrase: str) -> bool:
    return normalize_text(phrase) in text


# ---------------------------------------------------------------- teacher


class ScriptedTeacher:
    """Follows the reference plan with seeded imperfections. One instance per attempt (``seed`` differs per
    attempt): its plan is drawn on the first ``act`` and replayed by step number, so an attempt restarted after an
    environment failure replays the same decisions."""

    def __init__(self, seed: int = 0, imperfections: TeacherImperfections | None = None):
        self.seed = seed
        self.imperfections = imperfections or TeacherImperfections()
        self.name = f"scripted-teacher/seed={seed}"
        self._plans: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}

    def plan(self, task: Task, reflections: list[str]) -> list[dict[str, Any]]:
        """The steps this attempt will take: reference steps, with mistakes and detours drawn from the seed,
        except at decision points a reflection names."""
        key = (task.id, tuple(reflections))
        if key in self._plans:
            return self._plans[key]
        if not task.reference_solution:
            raise ValueError(f"task {task.id}: no reference_solution; the scripted teacher needs one")
        rng = seeded_rng(self.seed, task.id)
        # its own stream, so the other draws stay what they were before longer ways existed
        longer_rng = seeded_rng(self.seed, task.id, "longer")
        lessons = normalize_text(" ".join(reflections))
        # a reflection that called a step a longer way rules out every way of that kind
        ruled_out = {kind for kind, words in LONGER_WAYS.items() if normalize_text(f"({words})") in lessons}
        reference = task.reference_solution
        plan: list[dict[str, Any]] = []
        for position, step in enumerate(reference):
            label, alternatives = step.get("decision"), step.get("alternatives") or []
            draw, pick, notice = (
                rng.random(),
                rng.random(),
                rng.random(),
            )  # drawn always: one sequence per seed
            named = any(
                _mentions(lessons, describe_reference(s)) for s in [step, *alternatives] if s.get("action")
            )
            way, draw_longer = step.get("longer"), longer_rng.random()
            longer = (
                way is not None
                and way["kind"] not in ruled_out
                and not _mentions(lessons, describe_reference(way["steps"][0]))
                and draw_longer < self.imperfections.mistake_probs.get(way["kind"], 0.0)
            )
            *extra, last = way["steps"] if longer else [step]
            replaces = describe_reference(last) != describe_reference(step)  # a longer route, not a filter
            if longer and not replaces:  # the unnecessary filter first; then the step as usual
                plan += [{**s, "mistake": way["kind"]} for s in extra]
            if (
                label
                and alternatives
                and not named
                and draw < self.imperfections.mistake_probs.get(label, 0.0)
            ):
                wrong = alternatives[int(pick * len(alternatives))]
                if label == SKIP:
                    continue  # the alternative is the next reference step: this one is simply left out
                plan.append({**wrong, "mistake": label})
                if label == DETOUR or notice < self.imperfections.self_correct_prob:
                    plan += [{**r, "recovery": True} for r in wrong.get("recovery") or []]
                else:
                    continue  # the mistake stands; the attempt goes on from the wrong state
            if longer and replaces:
                plan += [{**s, "mistake": way["kind"]} for s in [*extra, last]]
                continue
            plan.append({**step, "reference_index": position})
        self._plans[key] = plan
        return plan

    def act(
        self, task: Task, observation: Observation, history: list[Step], reflections: list[str]
    ) -> Decision:
        from rmsweb_kedro.web.sandbox import resolve_equivalents, resolve_step
        from rmsweb_kedro.web.sandbox.reference import answer_thought

        plan = self.plan(task, reflections)
        if len(history) >= len(plan):
            return Decision(action=Action(type=ActionType.STOP, status="failure"), thought="Out of plan.")
        step = plan[len(history)]
        thought = step.get("thought") or describe_reference(step)
        try:
            action = resolve_step(step, observation)
        except LookupError as err:
            return Decision(
                action=None,
                thought=thought,
                raw_output=f"Thought: {thought}",
                error=f"target not found: {err}",
            )
        if step.get("read"):  # the answer as this page shows it: a wrong item opened earlier gives its value
            thought = answer_thought(action.text)
        # A step's equivalents hold at the state the reference reaches: only when the step before was the
        # reference's own step before (no mistake or recovery in between, e.g. the focus is in the typed field).
        position = step.get("reference_index")
        on_reference = position is not None and (
            position == 0
            or (len(history) > 0 and plan[len(history) - 1].get("reference_index") == position - 1)
        )
        return Decision(
            action=action,
            thought=thought,
            raw_output=format_reply(thought, action),
            equivalents=resolve_equivalents(step, observation) if on_reference else [],
        )


# ---------------------------------------------------------------- reflector


class ScriptedReflector:
    """Names the wrong decisions of a failed attempt against the task's reference solution, first one first,
    each with what to do instead: 'Wrong decision: select "M" in combobox "Size". Instead: select "L" in combobox
    "Size".'"""

    name = "scripted-reflector/v1"

    def wrong_decisions(self, task: Task, steps: list[Step]) -> list[tuple[str, str]]:
        """(what was done, what to do instead) for each decision point the attempt got wrong, in plan order."""
        taken = [d for d in (describe_taken(s) for s in steps) if d]
        taken_set = {normalize_text(d) for d in taken}
        found: list[tuple[int, str, str]] = []
        for step in task.reference_solution or []:
            label, alternatives = step.get("decision"), step.get("alternatives") or []
            right = describe_reference(step)
            way = step.get("longer")
            if way:
                said = describe_reference(way["steps"][0])
                if normalize_text(said) in taken_set and normalize_text(said) != normalize_text(right):
                    first = next(i for i, d in enumerate(taken) if normalize_text(d) == normalize_text(said))
                    found.append((first, f"{said} ({LONGER_WAYS[way['kind']]})", right))
            if not label or not alternatives:
                continue
            if label == SKIP:
                if normalize_text(right) not in taken_set:
                    found.append((len(taken), f"skipped: {right}", right))
                continue
            for wrong in alternatives:
                said = describe_reference(wrong)
                if normalize_text(said) in taken_set and normalize_text(said) != normalize_text(right):
                    first = next(i for i, d in enumerate(taken) if normalize_text(d) == normalize_text(said))
                    found.append((first, said, right))
                    break
        return [(said, right) for _, said, right in sorted(found, key=lambda f: f[0])]

    def reflect(
        self, task: Task, steps: list[Step], verdict: Verdict, final_answer: str | None
    ) -> tuple[str, Usage]:
        wrong = self.wrong_decisions(task, steps)
        if not wrong:
            return (
                f"The attempt failed ({verdict.reason}); no wrong decision point found. Follow the task exactly.",
                Usage(),
            )
        sentences = [f"Wrong decision: {said}. Instead: {right}." for said, right in wrong]
        return " ".join(sentences), Usage()
