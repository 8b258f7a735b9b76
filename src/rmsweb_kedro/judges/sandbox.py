"""The sandbox's judge: the task's programmatic checker, the ground truth every LLM judge is measured against."""

from __future__ import annotations

from collections.abc import Callable

from rmsweb_kedro.contracts.schema import Step, Task, Usage, Verdict


class SandboxJudge:
    """The task's programmatic checker over the server-side state of the attempt's browser session
    (``context["session_id"]``); ``session_state`` is ``SandboxServer.session_state``."""

    name = "sandbox-checker/v1"

    def __init__(self, session_state: Callable[[str], dict]):
        self.session_state = session_state

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]:
        from rmsweb_kedro.web.sandbox import check
        from rmsweb_kedro.web.sandbox.checkers import JUDGED_BY

        session_id = context.get("session_id")
        if session_id is None:
            reason = "no browser session to check"
            return Verdict(success=False, reason=reason, judge=self.name, judged_by=JUDGED_BY), Usage()
        return check(task, self.session_state(session_id), final_answer), Usage()
