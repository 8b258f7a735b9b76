"""The LLM judges of the public benchmarks: WebVoyager's auto-evaluation and Online-Mind2Web's WebJudge, over an
OpenAI-compatible endpoint.

Each judge follows its benchmark's published evaluation code step by step (message roles, which images in which
encoding, what the judge is shown, how the reply is read); the prompt texts come from
:mod:`rmsweb_kedro.judges.prompts` (the benchmark's own when fetched, else the project's wording). A verdict records
its judge spec (protocol, model, prompt source and hash, thresholds: ``Verdict.judged_by``), so every reported number
can be reproduced and told apart from the benchmark's official protocol.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rmsweb_kedro.contracts.actions import ActionType, format_action
from rmsweb_kedro.contracts.schema import JudgedBy, Step, Task, Usage, Verdict
from rmsweb_kedro.judges.prompts import WEBJUDGE, WEBVOYAGER, PromptSet, load_prompts
from rmsweb_kedro.models.endpoint import ChatEndpoint, EndpointError, image_part, text_part

#: Where ``python -m rmsweb_kedro.tasks.benchmarks download`` puts the task files and ``prompts/``.
OFFICIAL_PROMPTS_DIR = "data/01_raw/benchmarks"


def _screenshots(context: dict) -> list[str]:
    return [p for p in context.get("screenshots", []) if p and Path(p).is_file()]


def png_part(path: str | Path) -> dict[str, Any]:
    """The PNG file as is, base64, no ``detail`` (WebVoyager's ``encode_image``)."""
    return image_part(path)


def jpeg_part(path: str | Path, label: str = "image/jpeg") -> dict[str, Any]:
    """The image re-encoded as JPEG (RGB, PIL's default quality), ``detail: high``, as Online-Mind2Web's
    ``encode_image``; ``label`` is the media type the URL names (its outcome call names JPEG data ``image/png``)."""
    import base64
    import io

    from PIL import Image

    with Image.open(path) as image:
        buffer = io.BytesIO()
        (image if image.mode == "RGB" else image.convert("RGB")).save(buffer, format="JPEG")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{label};base64,{data}", "detail": "high"}}


#: The agent's own outputs: never facts of an action history.
_AGENT_OUTPUTS = (ActionType.ANSWER, ActionType.STOP)


def is_factual(step: Step) -> bool:
    """Whether ``step`` did something on the page: a parsed action other than the agent's answer or stop."""
    return step.action is not None and step.action.type not in _AGENT_OUTPUTS


def describe_action(step: Step) -> str:
    """The action's canonical text and, when the step's accessibility tree names its element, that element."""
    if step.action is None:
        raise ValueError(f"step {step.index} has no action to describe")
    text = format_action(step.action)
    if step.action.element is None or not step.axtree:
        return text
    marker = f"[{step.action.element}]"
    for line in step.axtree.splitlines():
        if line.rstrip().endswith(marker):
            return f"{text} on {line.strip()[: -len(marker)].strip()}"
    return text


def factual_actions(steps: Sequence[Step]) -> list[str]:
    """The action history the benchmark asks for: factual actions only, in order (no answer, stop or unparsed
    output). WebJudge shows the judge this list; the Online-Mind2Web submission writes it
    (``episodes/submission.py``)."""
    return [describe_action(s) for s in steps if is_factual(s)]


class EndpointJudge:
    """What the LLM judges share: their endpoint, prompt texts, cost account and the judge spec every verdict
    records (``Verdict.judged_by``)."""

    kind = ""
    slug = ""

    def __init__(self, endpoint: ChatEndpoint, prompts: PromptSet, thresholds: dict[str, Any]):
        self.endpoint = endpoint
        self.prompts = prompts
        self.thresholds = thresholds
        self.name = f"{self.slug}/{endpoint.config.model}/{prompts.source}-{prompts.sha256[:8]}"

    @property
    def protocol(self) -> str:
        return self.prompts.protocol

    def cost_of(self, usage: Usage) -> float:
        return self.endpoint.cost(usage)

    def judged_by(self) -> JudgedBy:
        return JudgedBy(
            kind=self.kind,
            protocol=self.protocol,
            model=self.endpoint.config.model,
            prompt_source=self.prompts.source,
            prompt_ref=self.prompts.ref,
            prompt_sha256=self.prompts.sha256,
            thresholds=self.thresholds,
        )

    def verdict(self, success: bool, reason: str, details: dict) -> Verdict:
        """A verdict named and specified as this judge's."""
        return Verdict(
            success=success, reason=reason, judge=self.name, judged_by=self.judged_by(), details=details
        )

    def _details(self, **extra: Any) -> dict:
        return {"protocol": self.protocol, "model": self.endpoint.config.model, **extra}

    def unavailable(
        self, error: str, usage: Usage, reason: str | None = None, **extra: Any
    ) -> tuple[Verdict, Usage]:
        """The verdict of a judge that could not judge (its endpoint still failed after its retries): marked
        ``details["judge_error"]``, so an episode records ``termination="judge_error"``, never the agent's failure
        (``judges.choice``)."""
        details = self._details(error=error, judge_error=True, **extra)
        return self.verdict(False, reason or error, details), usage


class WebVoyagerJudge(EndpointJudge):
    """WebVoyager's auto-evaluation (``evaluation/auto_eval.py``): an attempt without a final answer scores 0 and
    the judge is not asked; otherwise a system message and one user message holding the task and answer, the last
    ``max_attached_imgs`` screenshots as PNG, and a closing text part; reply read as NOT SUCCESS when it contains
    "NOT SUCCESS", SUCCESS when it contains "SUCCESS", unusable otherwise. ``context["screenshots"]``: the pages in
    order. The reply may take ``max_tokens`` (1000, as auto_eval.py asks)."""

    kind, slug = "webvoyager", "webvoyager"
    #: WebVoyager's ``evaluation/run_eval.sh`` attaches 15 images; its client asks for at most 1000 tokens.
    DEFAULT_IMAGES, MAX_TOKENS = 15, 1000

    def __init__(
        self,
        endpoint: ChatEndpoint,
        max_attached_imgs: int = DEFAULT_IMAGES,
        official_prompts: str | Path | None = OFFICIAL_PROMPTS_DIR,
        max_tokens: int = MAX_TOKENS,
    ):
        prompts = load_prompts(WEBVOYAGER, official_prompts)
        super().__init__(endpoint, prompts, {"max_attached_imgs": max_attached_imgs})
        self.max_attached_imgs = max_attached_imgs
        self.max_tokens = max_tokens

    def messages(self, task: Task, final_answer: str, screenshots: list[str]) -> list[dict]:
        # "<num>" is the configured image count, as in auto_eval.py, even when the episode has fewer pages.
        user = (
            self.prompts["user"]
            .replace("<task>", task.instruction)
            .replace("<answer>", final_answer)
            .replace("<num>", str(self.max_attached_imgs))
        )
        images = [png_part(p) for p in screenshots[-self.max_attached_imgs :]]
        return [
            {"role": "system", "content": self.prompts["system"]},
            {"role": "user", "content": [text_part(user), *images, text_part(self.prompts["closing"])]},
        ]

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]:
        if final_answer is None:
            reason = "no final answer: WebVoyager's auto-evaluation scores the attempt 0 without a judge call"
            return self.verdict(False, reason, self._details(screenshots=0)), Usage()
        shots = _screenshots(context)[-self.max_attached_imgs :]
        try:
            completion = self.endpoint.complete(
                self.messages(task, final_answer, shots), max_tokens=self.max_tokens
            )
        except EndpointError as err:
            return self.unavailable(f"judge endpoint error: {err}", Usage())
        text = completion.text
        details = self._details(raw_output=text, screenshots=[Path(p).name for p in shots])
        if "NOT SUCCESS" in text:
            success = False
        elif "SUCCESS" in text:
            success = True
        else:
            details["error"] = "neither SUCCESS nor NOT SUCCESS in the judge's reply"
            return self.verdict(False, "judge reply unparseable", details), completion.usage
        return self.verdict(success, text.strip()[-500:], details), completion.usage


def parse_key_points(reply: str) -> str:
    """The key points of WebJudge's first reply, as its code reads them: after "**Key Points**:" (else after the
    last "Key Points:"), blank lines dropped and each line's indentation stripped."""
    text = reply.replace("\n\n", "\n")
    part = text.split("**Key Points**:")[1] if "**Key Points**:" in text else text.split("Key Points:")[-1]
    return "\n".join(line.lstrip() for line in part.splitlines())


def parse_image_reply(reply: str) -> tuple[int, str]:
    """``(score, reasoning)`` of one image reply, as WebJudge's code reads it: the first digit 1-5 after the first
    "Score" (0 when there is none), and the first paragraph after "**Reasoning**:" on one line."""
    if "Score" not in reply:
        return 0, ""
    digits = re.findall(r"[1-5]", reply.split("Score")[1])
    if not digits:
        return 0, ""
    reasoning = reply.split("**Reasoning**:")[-1].strip().lstrip("\n").split("\n\n")[0].replace("\n", " ")
    return int(digits[0]), reasoning


def parse_status(reply: str) -> bool | None:
    """WebJudge's outcome: success when the text after the first "status:" (any case) contains "success"; None
    when the reply has no "status:" (the benchmark's code scores that 0)."""
    parts = reply.lower().split("status:")
    return "success" in parts[1] if len(parts) > 1 else None


class WebJudge(EndpointJudge):
    """Online-Mind2Web's WebJudge (``src/methods/webjudge_online_mind2web.py`` and ``src/run.py``), three stages,
    each a system message and one user message:

    1. key points from the task text alone;
    2. every screenshot (JPEG, ``detail: high``) scored 1-5 against the task and key points; the pages scoring at
       least ``score_threshold`` are kept, with their reasoning, the *first* ``max_images`` of each;
    3. the outcome from the task, key points, the factual action history (never the agent's answer, stop or
       unparsed output: :func:`factual_actions`) and the kept pages with
       their reasons, or, when none was kept, the no-image prompt; success when "success" follows "status:".

    ``context["screenshots"]``: the episode's pages in order (start page, then after every action), as in its
    submission folder. Every call asks for at most ``max_tokens`` (512, the benchmark client's default).
    """

    kind, slug = "webjudge", "webjudge"
    #: Online-Mind2Web's run.py: --score_threshold 3; MAX_IMAGE = 50 in webjudge_online_mind2web.py.
    DEFAULT_THRESHOLD, DEFAULT_MAX_IMAGES, MAX_TOKENS = 3, 50, 512

    def __init__(
        self,
        endpoint: ChatEndpoint,
        score_threshold: int = DEFAULT_THRESHOLD,
        max_images: int = DEFAULT_MAX_IMAGES,
        official_prompts: str | Path | None = OFFICIAL_PROMPTS_DIR,
        max_tokens: int = MAX_TOKENS,
    ):
        prompts = load_prompts(WEBJUDGE, official_prompts)
        super().__init__(endpoint, prompts, {"score_threshold": score_threshold, "max_images": max_images})
        self.score_threshold = score_threshold
        self.max_images = max_images
        self.max_tokens = max_tokens

    def _ask(self, system: str, content: list[dict[str, Any]]) -> tuple[str, Usage]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": content}]
        completion = self.endpoint.complete(messages, max_tokens=self.max_tokens)
        return completion.text, completion.usage

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]:
        p = self.prompts
        usage = Usage()
        try:
            reply, used = self._ask(
                p["key_points_system"], [text_part(p["key_points_user"].format(task=task.instruction))]
            )
            usage += used
            key_points = parse_key_points(reply)
            scored, images, reasons = [], [], []
            for path in _screenshots(context):
                prompt = p["image_user"].format(task=task.instruction, key_points=key_points)
                reply, used = self._ask(p["image_system"], [text_part(prompt), jpeg_part(path)])
                usage += used
                score, reasoning = parse_image_reply(reply)
                scored.append({"screenshot": Path(path).name, "score": score, "reasoning": reasoning})
                if score >= self.score_threshold:
                    images.append(jpeg_part(path, label="image/png"))
                    if reasoning:
                        reasons.append(reasoning)
            images, reasons = images[: self.max_images], reasons[: self.max_images]
            actions = factual_actions(steps)
            template = p["outcome_user"] if images else p["outcome_user_no_images"]
            shown = template.format(
                task=task.instruction,
                last_actions="\n".join(f"{i + 1}. {a}" for i, a in enumerate(actions)),
                key_points=key_points,
                thoughts="\n".join(f"{i + 1}. {r}" for i, r in enumerate(reasons)),
            )
            outcome, used = self._ask(p["outcome_system"], [text_part(shown), *images])
            usage += used
        except EndpointError as err:
            return self.unavailable(f"judge endpoint error: {err}", usage)
        details = self._details(
            key_points=key_points,
            scores=scored,
            kept=[s["screenshot"] for s in scored if s["score"] >= self.score_threshold][: self.max_images],
            input_text=shown,
            raw_output=outcome,
        )
        success = parse_status(outcome)
        if success is None:
            details["error"] = 'no "Status:" in the judge\'s reply (the benchmark scores it 0)'
            return self.verdict(False, "judge reply unparseable", details), usage
        return self.verdict(success, outcome.strip()[-500:], details), usage
