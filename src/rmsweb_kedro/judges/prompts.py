"""The LLM judges' prompt texts: the benchmarks' own when they were fetched, else the project's own wording.

The project ships no copy of a benchmark's prompts. ``python -m rmsweb_kedro.tasks.benchmarks download`` fetches the
official evaluation source files at a pinned commit into ``<benchmarks folder>/prompts/``
(:data:`~rmsweb_kedro.judges.prompts.PROMPT_FILES`); :func:`load_prompts` reads their string constants
with :mod:`ast` (nothing of them runs) and hands them to the judges verbatim. When a file is absent, or differs from
the pinned digest, the judge uses the project's wording below, which asks for the same reply format, and every
verdict records ``prompt_source="project"`` so no report calls its numbers the official protocol.

WebTailBench publishes no verifier prompt (Fara's README lists the task-verification pipeline as coming soon), so
its rubric verifier always uses the project's wording.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from rmsweb_kedro.contracts.remote import RAW_GITHUB, RemoteFile
from rmsweb_kedro.contracts.schema import PromptSource

logger = logging.getLogger(__name__)

PROJECT_PROMPT_VERSION = "rmsweb-v2"

WEBJUDGE = "online-mind2web/webjudge"
WEBVOYAGER = "webvoyager/auto-eval"


@dataclass(frozen=True)
class PromptFile(RemoteFile):
    """A benchmark's official evaluation source, pinned at a commit, whose prompt texts a judge uses verbatim
    (:mod:`rmsweb_kedro.judges.prompts`)."""

    protocol: str = ""

    @property
    def ref(self) -> str:
        """``owner/repo@commit:path`` of the pinned file."""
        owner, repo, commit, path = self.url.removeprefix(f"{RAW_GITHUB}/").split("/", 3)
        return f"{owner}/{repo}@{commit}:{path}"


#: The official judge prompts, beside the task files under ``prompts/``. Online-Mind2Web's WebJudge is read from
#: the copy of the benchmark's evaluation code in microsoft/fara (the same repository as its task file); WebVoyager's
#: auto-evaluation from its own repository.
PROMPT_FILES: tuple[PromptFile, ...] = (
    PromptFile(
        "prompts/online_mind2web_webjudge.py",
        f"{RAW_GITHUB}/microsoft/fara/3f3f1fd82cc2769a6630932d1670bac7349f4a42/webeval/src/webeval/benchmarks/om2w/"
        "impl/src/methods/webjudge_online_mind2web.py",
        "90a8d7a0d8cdadff0a111d2ce13085ced86a028e9f59abe003d64869b5e42d1b",
        protocol="online-mind2web/webjudge",
    ),
    PromptFile(
        "prompts/webvoyager_auto_eval.py",
        f"{RAW_GITHUB}/MinorJerry/WebVoyager/5a7896738c10bfb8b9edccce6bb0e0411f8ae569/evaluation/auto_eval.py",
        "eb86b5a06e4fca1c483ce9a93812d505b69502d8ed3a6620affe14a188503f98",
        protocol="webvoyager/auto-eval",
    ),
)

#: For each protocol: the text the judge needs -> where the official source file holds it
#: (``<function>.<variable>``; ``#2`` is the second assignment of that name; ``.text`` a constant text part).
OFFICIAL_KEYS: dict[str, dict[str, str]] = {
    WEBJUDGE: {
        "key_points_system": "identify_key_points.system_msg",
        "key_points_user": "identify_key_points.prompt",
        "image_system": "judge_image.system_msg",
        "image_user": "judge_image.prompt",
        "outcome_system": "WebJudge_Online_Mind2Web_eval.system_msg",
        "outcome_user": "WebJudge_Online_Mind2Web_eval.prompt",
        "outcome_user_no_images": "WebJudge_Online_Mind2Web_eval.prompt#2",
    },
    WEBVOYAGER: {
        "system": "SYSTEM_PROMPT",
        "user": "USER_PROMPT",
        "closing": "auto_eval_by_gpt4v.text",
    },
}

# The project's own wording, same placeholders and reply formats as the protocols ask for.
_PROJECT_TEXTS: dict[str, dict[str, str]] = {
    WEBJUDGE: {
        "key_points_system": (
            "You list what a web task explicitly requires.\n\n"
            "Read the task and write down each requirement it states: the item, the values, the filters, the "
            "order of results, the action that completes it. State only what the task says; add nothing. A "
            "superlative in the task (cheapest, newest, best rated...) is a requirement to sort or filter by it.\n\n"
            "Reply as:\n**Key Points**:\n1. <requirement>\n2. <requirement>\n(one per line, no explanations)"
        ),
        "key_points_user": "Task: {task}",
        "image_system": (
            "You judge whether one screenshot from a web agent's session is evidence for finishing a task.\n\n"
            "Describe what the page shows (text, controls, applied filters, results), then decide how much it "
            "shows of the steps or the outcome the task requires. Partial but relevant evidence still counts.\n\n"
            "Reply as:\n**Reasoning**: <what the page shows and why it matters or not>\n"
            "**Score**: <1-5> (1 nothing relevant, 2 little and unclear, 3 some relevant steps, "
            "4 important evidence but incomplete, 5 clear evidence of a required step or of the result)"
        ),
        "image_user": (
            "**Task**: {task}\n\n**Key Points for Task Completion**: {key_points}\n\n"
            "The image is one page the agent saw."
        ),
        "outcome_system": (
            "You decide whether a web agent completed a user's task on a website. You get the task, its key "
            "points, the actions the agent took and the pages that matter, each with why.\n\n"
            "Rules:\n"
            "1. Every key point must be met, as the pages and actions show; a claim without evidence counts for "
            "nothing.\n"
            "2. Filters and sorting must have been applied through the site's controls and be visible in the "
            "results; typing every requirement into a search box does not guarantee them.\n"
            "3. Ranges (prices, years, counts) must match the task exactly: a narrower or wider filter fails.\n"
            "4. A task that needs a submission or a displayed result needs it done.\n"
            "5. An empty result reached by the right actions is still a success.\n"
            "6. When the page already shows all items, no filter is needed if the right item was chosen.\n\n"
            "Reply in two lines:\n"
            "Thoughts: <your check of each key point against the rules>\n"
            'Status: "success" or "failure"'
        ),
        "outcome_user": (
            "User Task: {task}\n\nKey Points: {key_points}\n\nAction History:\n{last_actions}\n\n"
            "Pages from the trajectory that may matter, and why:\n{thoughts}"
        ),
        "outcome_user_no_images": "User Task: {task}\n\nKey Points: {key_points}\n\nAction History:\n{last_actions}",
    },
    WEBVOYAGER: {
        "system": (
            "You check whether a web agent accomplished a task. You get the task, the agent's final response "
            "and the last screenshots of its session.\n\n"
            "- Do not browse or act yourself; judge only what you are given.\n"
            "- Assume nothing the screenshots do not show.\n"
            "- A task with several parts fails when any part is missing.\n"
            "- The screenshots are real; the response was written by the agent afterwards. Where they disagree, "
            "the screenshots win; what the response adds and the screenshots do not show, you may accept.\n\n"
            "Explain your reasoning, then give your verdict as 'SUCCESS' or 'NOT SUCCESS'."
        ),
        "user": "TASK: <task>\nResult Response: <answer>\n<num> screenshots at the end: ",
        "closing": "Your verdict:\n",
    },
}


@dataclass(frozen=True)
class PromptSet:
    """The texts one judge uses, where they came from, and a digest of them (recorded in every verdict)."""

    protocol: str
    texts: dict[str, str]
    source: PromptSource
    ref: str
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(json.dumps(self.texts, sort_keys=True).encode()).hexdigest()
        object.__setattr__(self, "sha256", digest)

    def __getitem__(self, key: str) -> str:
        return self.texts[key]


def string_constants(source: str) -> dict[str, str]:
    """The string constants a Python source assigns, by ``<function>.<name>`` (``<name>`` at module level; a
    repeated name gets ``#2``, ``#3``...), and the constant ``{"type": "text", "text": ...}`` parts as
    ``<function>.text``. Parsed, never run."""
    found: dict[str, str] = {}

    def add(key: str, value: str) -> None:
        n, name = 1, key
        while name in found:
            n += 1
            name = f"{key}#{n}"
        found[name] = value

    def visit(body: list[ast.stmt], scope: str) -> None:
        nodes = [n for stmt in body for n in ast.walk(stmt)]
        for node in sorted(nodes, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
            prefix = f"{scope}." if scope else ""
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
                if (
                    isinstance(target, ast.Name)
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, str)
                ):
                    add(prefix + target.id, value.value)
            elif isinstance(node, ast.Dict) and scope:
                pairs = {
                    k.value: v
                    for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant)
                }
                text = pairs.get("text")
                if (
                    pairs.get("type") is not None
                    and isinstance(text, ast.Constant)
                    and isinstance(text.value, str)
                ):
                    add(f"{prefix}text", text.value)

    tree = ast.parse(source)
    functions = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    visit([n for n in tree.body if n not in functions], "")
    for function in functions:
        visit(function.body, function.name)
    return found


def official_file(protocol: str) -> PromptFile:
    return next(f for f in PROMPT_FILES if f.protocol == protocol)


def load_prompts(protocol: str, folder: str | Path | None, remote: PromptFile | None = None) -> PromptSet:
    """The prompt texts of ``protocol``: the official ones from ``folder/<remote.name>`` when that file is there
    with the pinned digest, else the project's wording (logged). ``remote`` defaults to the pinned file."""
    remote = remote or official_file(protocol)
    fallback = PromptSet(
        protocol, dict(_PROJECT_TEXTS[protocol]), "project", f"rmsweb_kedro/{PROJECT_PROMPT_VERSION}"
    )
    path = Path(folder) / remote.name if folder else None
    if path is None or not path.is_file():
        logger.warning(
            "%s: official prompts not found (%s); using the project's wording. Fetch them with "
            "`python -m rmsweb_kedro.tasks.benchmarks download` (docs/evaluate.md)",
            protocol,
            path or "no prompts folder configured",
        )
        return fallback
    content = path.read_bytes()
    digest = hashlib.sha256(content).hexdigest()
    if digest != remote.sha256:
        logger.warning(
            "%s: %s has sha256 %s, not the pinned %s; using the project's wording",
            protocol,
            path,
            digest,
            remote.sha256,
        )
        return fallback
    constants = string_constants(content.decode("utf-8"))
    missing = [where for where in OFFICIAL_KEYS[protocol].values() if where not in constants]
    if missing:
        raise ValueError(f"{path}: the pinned file lacks the prompt texts {missing}")
    texts = {key: constants[where] for key, where in OFFICIAL_KEYS[protocol].items()}
    return PromptSet(protocol, texts, "official", remote.ref)
