"""Production configuration a researcher can trust: what `kedro run --env production` reads, collection tasks
disjoint from evaluation tasks, reply budgets that hold a thought, several live browsers, and ``resume: true``
continuing only a run of the same data and job."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rmsweb_kedro.contracts.schema import tasks_from_frame, tasks_to_frame
from rmsweb_kedro.settings import CONFIG_LOADER_ARGS, CONFIG_LOADER_CLASS
from rmsweb_kedro.tasks.sources import TasksParams, assemble

CONF = Path(__file__).resolve().parents[2] / "conf"


def parameters(conf: Path, env: str | None) -> dict:
    return CONFIG_LOADER_CLASS(conf_source=str(conf), env=env, **CONFIG_LOADER_ARGS)["parameters"]


def test_env_production_reads_base_and_production_never_local(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF / "base", conf / "base")
    shutil.copytree(CONF / "production", conf / "production")
    (conf / "local").mkdir()
    (conf / "local" / "parameters_mine.yml").write_text("collect: {n_envs: 99}\n")
    assert parameters(conf, "production")["collect"]["n_envs"] == 8  # conf/production's; local is not read
    assert parameters(conf, None)["collect"]["n_envs"] == 99  # a plain `kedro run` reads conf/local


def test_production_collects_on_train_and_evaluates_on_held_out_sites(tmp_path):
    params = parameters(CONF, "production")
    assert params["collect"]["split"] == "train" and params["mining"]["online"]["split"] == "train"
    assert set(params["evaluate"]["online"]["splits"]) <= {"val", "test"}
    tasks = TasksParams.model_validate(params["tasks"])
    assert tasks.split.by == "site" and tasks.sources == ["proposer"]
    # a proposer's file of 40 tasks on 20 sites: no site has tasks in both collection's and evaluation's splits
    from rmsweb_kedro.contracts.schema import Task

    proposed = [Task(id=f"t{i}", source="proposed", site=f"site{i % 20}.example",
                     start_url=f"https://site{i % 20}.example/", instruction=f"task {i}") for i in range(40)]  # fmt: skip
    path = tmp_path / "proposed.jsonl"
    path.write_text("".join(t.model_dump_json() + "\n" for t in proposed))
    table, _, _ = assemble(tasks_to_frame([]), tasks.model_copy(update={"proposed": str(path)}))
    rows = tasks_from_frame(table)
    train = {t.site for t in rows if t.split == "train"}
    held = {t.site for t in rows if t.split in ("val", "test")}
    assert train and held and not train & held


def test_every_decoding_stage_has_room_for_a_thought():
    params = parameters(CONF, "production")
    assert params["sft"]["training"]["prompt"]["include_thought"] is True
    budgets = {
        "sft accuracy states": params["sft"]["accuracy_max_new_tokens"],
        "mining scoring": params["mining"]["scoring"]["max_new_tokens"],
        "salvage_ds sampling": params["salvage_ds"]["algorithm"]["max_new_tokens"],
        "evaluate and live": params["evaluate"]["policy"]["max_new_tokens"],
    }
    assert set(budgets.values()) == {256}, budgets
    assert params["live"]["n_envs"] > 1


def test_production_judges_read_free_text_answers_and_live_may_leave_the_start_site():
    from rmsweb_kedro.judges.choice import JudgeSpecConfig
    from rmsweb_kedro.web.browser import BrowserConfig

    params = parameters(CONF, "production")
    judges = [
        params["collect"]["judge"],
        params["mining"]["online"]["judge"],
        params["evaluate"]["online"]["judge"],
    ]
    assert {JudgeSpecConfig.model_validate(j).reference_answer for j in judges} == {"llm"}
    assert BrowserConfig.model_validate(params["live"]["browser"]).allowed_domains == ["*"]


def test_resume_continues_only_the_same_data_and_job(tmp_path, tiny_checkpoint, tiny_states):
    from rmsweb_kedro.models.modeling import load_model
    from rmsweb_kedro.training.loop import train_loop
    from rmsweb_kedro.training.sft import SFTCollator, SFTConfig, sft_loss

    def run(states, **loop):
        model, processor = load_model({"path": str(tiny_checkpoint)})
        settings = {"output_dir": str(tmp_path / "run"), "batch_size": 4, "warmup_steps": 0, "eval_every": 0,
                    "save_every": 1, "progress": False, "max_steps": 1} | loop  # fmt: skip
        config = SFTConfig(loop=settings, loss_on="all")
        return train_loop(model, states, SFTCollator(processor, config.prompt, "all"), sft_loss, config.loop)

    first = run(tiny_states[:8])
    assert first.step == 1 and json.loads((tmp_path / "run" / "run_identity.json").read_text())["data"]
    with pytest.raises(ValueError, match=r"another run: the training data differ .*loop.resume: false"):
        run(tiny_states[8:16], max_steps=2)
    with pytest.raises(ValueError, match=r"the job differs in \['learning_rate'\]"):
        run(tiny_states[:8], max_steps=2, learning_rate=0.1)
    resumed = run(tiny_states[:8], max_steps=2)  # a longer run of the same job continues
    assert resumed.resumed_from == 1 and resumed.step == 2
