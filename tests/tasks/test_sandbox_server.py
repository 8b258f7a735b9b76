"""The sandbox server starts only when a task needs it: a sandbox task, or a start page on the sandbox's hosts."""

import pytest

from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.contracts.schema import JudgeSpec, Task
from rmsweb_kedro.episodes.rollouts import EpisodeSpec, Roles, run_rollouts
from rmsweb_kedro.judges.answer import ExactAnswerJudge
from tests.fixtures_web import chromium_available

pytestmark = pytest.mark.browser


class Answers:
    name = "answers"

    def act(self, task, observation, history, reflections) -> Decision:
        return Decision(action=Action(type=ActionType.ANSWER, text="42"), raw_output='answer("42")')


def run(task: Task) -> tuple[list, bool | None]:
    servers: list = []

    def judge(server):
        servers.append(server)
        return ExactAnswerJudge()

    roles = Roles(agent=lambda _seed: Answers(), judge=judge)
    ((trajectory,),) = run_rollouts([EpisodeSpec(key=task.id, task=task, max_steps=2)], roles, sandbox_seed=0,
                                    progress=None)  # fmt: skip
    return servers, trajectory.success


def test_no_sandbox_server_for_tasks_elsewhere_and_one_for_its_hosts(local_site):
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    judge = JudgeSpec(kind="reference_answer", config={"reference_answer": "42"})
    elsewhere = Task(id="file-1", source="file", site="127.0.0.1", start_url=local_site, instruction="the answer",
                     judge=judge)  # fmt: skip
    servers, success = run(elsewhere)
    assert servers == [None] and success is True
    on_sandbox = elsewhere.model_copy(update={"id": "file-2", "start_url": "http://shop.sandbox.test/"})
    servers, success = run(on_sandbox)
    assert servers[0] is not None and success is True
