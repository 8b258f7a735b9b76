"""One ``kedro run`` of the recipe (tasks -> collect -> trajectories -> sft_data -> sft -> mining -> salvage_ds ->
evaluate) on a task file of tasks that are not sandbox tasks: sandbox pages reached by URL as if they were unknown
websites (source ``file``, judge kind ``none``), judged by WebJudge through the project's local OpenAI-compatible
server (a scripted judge model behind the real protocol: vLLM cannot run here). The tiny model is trained; no
sandbox checker judges anything; one task's attempts are judged failures, so collection retries it with a
reflection."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import JudgeSpec
from tests.collect.local_openai_server import LocalChatServer
from tests.evaluate.conftest import judge_model, request_text
from tests.fixtures_web import chromium_available
from tests.tracking.test_tracking import kedro_run

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = Path(__file__).resolve().parents[2]


def task_file(path: Path, sandbox_task_list) -> list:
    """Six short tasks, one per site (four train, two val), as a task file in the project's Task rows: source
    ``file``, no checker of their own (judge ``none``); the scripted teacher follows their reference steps."""
    picked: dict[str, object] = {}
    for task in sorted(sandbox_task_list, key=lambda t: (t.reference_length or 99, t.id)):
        if task.site != "hotels" and task.site not in picked:
            n = len(picked)
            picked[task.site] = task.model_copy(update={"id": f"mine-{n}", "source": "file", "metadata": {},
                                                        "split": "train" if n < 4 else "val",
                                                        "judge": JudgeSpec(kind="none")})  # fmt: skip
    tasks = list(picked.values())
    path.write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    return tasks


def test_the_recipe_runs_on_a_task_file_judged_by_an_llm_judge(tmp_path, sandbox_task_list):
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    project = tmp_path
    shutil.copy(PROJECT / "pyproject.toml", project)
    (project / "src").mkdir()
    shutil.copytree(PROJECT / "conf" / "base", project / "conf" / "base")
    (project / "conf" / "local").mkdir()
    tasks = task_file(project / "my_tasks.jsonl", sandbox_task_list)
    failing = tasks[1].instruction

    def judge(body: dict) -> str | int:
        # WebJudge's last stage says failure for one task, success for the others
        if 'Status: "success" or "failure"' in request_text(body) and failing in request_text(body):
            return 'Thoughts: the key point is not met.\nStatus: "failure"'
        return judge_model(body)

    with LocalChatServer() as server:
        server.respond = judge
        llm_judge = {"kind": "webjudge", "official_prompts": None, "endpoint": {
            "base_url": server.base_url, "model": "judge-test", "api_key_env": None, "max_retries": 0}}  # fmt: skip
        params = {
            "tracking": {"enabled": False},
            "tasks": {"sources": ["file"], "files": [{"path": "my_tasks.jsonl", "shape": "project"}]},
            "collect": {"max_tasks": None, "attempts": 2, "n_envs": 1, "max_steps": 12, "progress": False,
                        "judge": llm_judge},
            "sft": {"augmentation": {"copies": 0}, "accuracy_states": 0,
                    "training": {"loop": {"max_steps": 4, "batch_size": 4, "eval_every": 0, "save_every": 0,
                                          "max_seconds": None, "log_every": 2, "progress": False,
                                          "mixed_precision": "no"}}},
            "mining": {"scoring": {"k": 2, "max_new_tokens": 8, "batch_size": 8}, "max_states_probed": 8,
                       "online": {"rollouts": 1, "max_steps": 2, "judge": llm_judge}},
            "salvage_ds": {"algorithm": {"group_size": 2, "max_new_tokens": 8, "max_rounds": 1},
                           "loop": {"max_steps": 2, "batch_size": 2, "save_every": 0, "max_seconds": None,
                                    "progress": False},
                           "max_eval_states": 2, "eval_samples": 1, "seeds": [0]},
            # 3 train tasks collected (one of 4 judged failed): one to train on, one val, one dev
            "sft_data": {"val_tasks": 1, "probe_tasks": 0, "dev_tasks": 1, "min_train_tasks": 1},
            "evaluate": {"policy": {"max_new_tokens": 8}, "bootstrap_resamples": 100,
                         "offline": {"max_states": 4},
                         "online": {"max_tasks": 1, "max_held_out_tasks": 0, "max_steps": 2, "n_envs": 1,
                                    "judge": llm_judge}},
        }  # fmt: skip
        kedro_run(project, ["__default__"], params)
        judged_requests = len(server.requests)
    data = project / "data"
    table = pl.read_parquet(data / "02_intermediate" / "tasks" / "tasks.parquet")
    assert table["id"].to_list() == [t.id for t in tasks] and set(table["source"]) == {"file"}
    log = pl.read_parquet(data / "02_intermediate" / "collect" / "collection_log.parquet")
    assert set(log["task_id"]) == {t.id for t in tasks[:4]}, "collect takes the train tasks of the file"
    kinds = {json.loads(t)["verdict"]["judged_by"]["kind"] for t in log["trajectory"]}
    assert kinds == {"webjudge"} and judged_requests > 0
    retried = log.filter(pl.col("task_id") == tasks[1].id)
    assert retried["attempt"].to_list() == [1, 2] and retried["success"].to_list() == [False, False]
    assert json.loads(retried["trajectory"][1])["reflections"], "the retry is conditioned on a reflection"
    assert log.filter(pl.col("task_id") != tasks[1].id)["success"].all()
    assert (data / "06_models" / "sft_model").is_dir() and (data / "06_models" / "rmsweb_model").is_dir()
    mining = json.loads((data / "08_reporting" / "mining" / "mining_report.json").read_text())
    assert mining, "mining reported"
    episodes = pl.read_parquet(data / "07_model_output" / "evaluate" / "online_episodes.parquet")
    assert set(episodes["model"]) == {"base", "sft", "rmsweb_s0"}
    assert set(episodes["task_id"]) <= {t.id for t in tasks if t.split == "val"}
    assert not any((j or "").startswith("sandbox-checker") for j in episodes["judge"].to_list())
