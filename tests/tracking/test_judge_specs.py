"""Every verdict in the evaluation tables names its judge spec (``schema.JudgedBy``: kind, protocol, model, prompt
source/ref/hash, thresholds), and the run manifest collects the distinct specs: ``run_online`` in the real sandbox
with real Chromium (an agent that stops at once: cheap, and judged all the same)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.contracts.schema import JudgedBy, tasks_to_frame
from rmsweb_kedro.pipelines.evaluate import nodes
from rmsweb_kedro.runs.hooks import ProvenanceHooks
from rmsweb_kedro.runs.provenance import start_manifest
from tests.fixtures_web import chromium_available

pytestmark = [pytest.mark.browser, pytest.mark.slow]


class Stopper:
    name = "stopper"

    def act(self, task, observation, history, reflections) -> Decision:
        return Decision(
            action=Action(type=ActionType.STOP, status="infeasible"), raw_output='stop("infeasible")'
        )


def test_every_verdict_row_has_a_judge_spec_and_the_manifest_lists_it(sandbox_task_list, tmp_path):
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    params = {
        "online": {
            "max_tasks": 2,
            "max_held_out_tasks": 1,
            "runs": 1,
            "max_steps": 3,
            "keep_screenshots": False,
        }
    }
    episodes, _ = nodes.run_online(tasks_to_frame(sandbox_task_list), Stopper(), params, model_name="stopper")
    judged = episodes.filter(pl.col("success").is_not_null())
    assert judged.height == 3
    specs = [JudgedBy.model_validate_json(spec) for spec in judged["judged_by"]]
    for spec in specs:
        assert spec.kind == "sandbox_checker" and spec.protocol and spec.prompt_source == "none"
    hooks = ProvenanceHooks()
    hooks.manifest = start_manifest(tmp_path, {}, "kedro run --pipelines evaluate", ["evaluate"])
    hooks.after_dataset_saved("online_episodes", episodes)  # as Kedro calls it when the node saves the table
    assert [json.loads(j) for j in hooks.manifest.judges] == [specs[0].model_dump(mode="json")]
