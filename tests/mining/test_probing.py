"""Mining against real policies in the real sandbox: the online path end to end, and a policy trained without one
site, whose states mining must single out."""

from __future__ import annotations

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import tasks_to_frame
from rmsweb_kedro.measures.mining import FailureMode
from tests.mining.conftest import WEAK_SITE

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_online_probing_end_to_end(mining_tasks, reference_states, tiny_checkpoint, tmp_path, monkeypatch):
    """An untrained policy rolled out in the sandbox fails; its first divergence from the reference becomes a
    probed STATE row carrying the reference action and the screenshot of its page, kept under the mining folder,
    critical as an online divergence. Of the six tasks with references, the one of the probe pool (held out of SFT)
    is the one rolled out on. The rollout is journaled: a re-run takes it from the journal."""
    from rmsweb_kedro.models.modeling import load_model
    from rmsweb_kedro.pipelines.mining.nodes import probe_online, report_mining, select_critical_states

    monkeypatch.chdir(tmp_path)  # no image_root: the row's screenshot is relative to the working directory
    task = next(t for t in mining_tasks if t.site == WEAK_SITE)
    params = {
        "scoring": {"k": 2, "max_new_tokens": 8},
        "online": {"rollouts": 1, "max_steps": 3, "screenshot_root": "mining/online_screenshots"},
    }  # fmt: skip
    pool = pl.col("task_id") == task.id
    policy = load_model({"path": str(tiny_checkpoint)})
    inputs = (
        tasks_to_frame(mining_tasks),
        reference_states.filter(~pool),
        reference_states.filter(pool),
        policy,
    )
    probes, rollouts, steps = probe_online(*inputs, params)
    assert {k: rollouts[k] for k in ("rollouts", "failure", "diverged")} == {
        "rollouts": 1,
        "failure": 1,
        "diverged": 1,
    }
    (episode,) = rollouts["episodes"]
    assert episode["task_id"] == task.id and episode["success"] is False and episode["n_steps"] >= 1
    assert probes.height == 1
    row = probes.row(0, named=True)
    first = reference_states.filter(pl.col("task_id") == task.id).sort("step_index").row(0, named=True)
    # the policy's own state on the start page (same page as the reference's) with the reference's action there
    assert row["state_id"] == f"mining-online__{task.id}:0"
    assert (row["url"], row["axtree"], row["reference_action"]) == (
        first["url"],
        first["axtree"],
        first["reference_action"],
    )
    assert row["source"] == "online" and row["n_samples"] == 2 and row["competence"] == 0.0
    assert row["in_sft"] is False  # a state of a task SFT did not train on
    assert row["failure_mode"] == FailureMode.INVALID_FORMAT.value
    assert row["screenshot"] == f"mining/online_screenshots/mining-online__{task.id}/step_000.png"
    assert (tmp_path / row["screenshot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert row["origin"] == "online_divergence"
    offline = probes.clear().with_columns(pl.lit("offline").alias("source"))
    mined = select_critical_states(offline, probes, params)
    by_origin = report_mining(offline, probes, mined, rollouts, params)["by_origin"]
    assert mined["origin"].to_list() == ["online_divergence"]
    assert by_origin["online_divergence"]["not_in_sft"] == {"states": 1, "selected": 1}
    # the journal holds the rollout (found by task); a re-run, as after a kill, rolls out nothing new
    journal = tmp_path / "data/07_model_output/mining/online_journal.jsonl"
    assert len(journal.read_text().splitlines()) == 1
    again = probe_online(*inputs, params)
    assert len(journal.read_text().splitlines()) == 1
    assert again[0].equals(probes) and again[1] == rollouts and again[2].equals(steps)


def test_mining_finds_the_weak_site(reference_states, weak_policy_dir):
    """The weak site's states are the probe pool: held out of SFT, as sft_data holds out probe_tasks of the
    tasks. Mining singles them out, and the report says the critical states came from there."""
    from rmsweb_kedro.models.modeling import load_model
    from rmsweb_kedro.pipelines.mining.nodes import (
        prepare_corpus,
        probe_offline,
        report_mining,
        select_critical_states,
    )

    params = {
        "scoring": {"k": 4, "max_new_tokens": 48, "batch_size": 16}, "max_states_probed": None,
        "competence_threshold": 0.5, "ballast_share": 0.0, "online": {"rollouts": 0},
    }  # fmt: skip
    weak = pl.col("site") == WEAK_SITE
    corpus = prepare_corpus(reference_states.filter(~weak), reference_states.filter(weak), params)
    assert corpus["in_sft"].to_list() == (corpus["site"] != WEAK_SITE).to_list()
    probes = probe_offline(corpus, load_model({"path": str(weak_policy_dir)}), params)
    online = probes.clear().with_columns(pl.lit("online").alias("source"))
    mined = select_critical_states(probes, online, params)
    competence = {
        "weak": probes.filter(weak)["competence"].mean(),
        "trained": probes.filter(~weak)["competence"].mean(),
    }
    assert competence["weak"] + 0.3 < competence["trained"], competence
    weak_share_corpus = probes.filter(weak).height / probes.height
    weak_share_mined = mined.filter(weak).height / mined.height
    assert weak_share_mined > weak_share_corpus, (weak_share_mined, weak_share_corpus)
    assert mined.filter(weak).height >= 0.75 * probes.filter(weak).height
    by_in_sft = report_mining(probes, online, mined, {"rollouts": 0}, params)["by_in_sft"]
    held_out, trained = by_in_sft["not_in_sft"]["offline"], by_in_sft["in_sft"]["offline"]
    assert (
        held_out["probed"] == probes.filter(weak).height and held_out["critical"] == mined.filter(weak).height
    )
    assert held_out["critical_share"] > trained["critical_share"], by_in_sft
    assert by_in_sft["not_in_sft"]["selected"]["critical"] == mined.filter(weak).height


def test_online_state_shows_its_screenshot_to_the_model(
    mining_tasks, reference_states, released_checkpoint, tmp_path
):
    """Screenshots on, released-layout checkpoint: the online state's page image is kept under mining's folder,
    found from the prompt's ``image_root`` like a corpus state's, and reaches the model (the greedy reply's first
    log-prob moves when only the picture is swapped)."""
    from PIL import Image

    from rmsweb_kedro.agents.hf_policy import sample_replies
    from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages, image_paths
    from rmsweb_kedro.models.modeling import load_model
    from rmsweb_kedro.pipelines.mining.nodes import probe_online
    from tests.fixtures_model import draw_screenshot

    (tmp_path / "raw").mkdir()
    prompt = {"observation": ["screenshot", "axtree"], "image_root": str(tmp_path / "raw")}
    shots = tmp_path / "mining" / "online_screenshots"
    params = {
        "scoring": {"k": 1, "max_new_tokens": 4},
        "policy": {"prompt": prompt},
        "online": {"rollouts": 1, "max_steps": 2, "screenshot_root": str(shots)},
    }
    task = next(t for t in mining_tasks if t.site == WEAK_SITE)
    model, processor = load_model({"path": str(released_checkpoint)})
    probes, counts, _steps = probe_online(
        tasks_to_frame([task]), reference_states, reference_states.clear(), (model, processor), params
    )
    assert counts["diverged"] == 1 and probes.height == 1
    row = probes.row(0, named=True)
    assert row["screenshot"] == f"../mining/online_screenshots/mining-online__{task.id}/step_000.png"
    config = PromptConfig.model_validate(prompt)
    (image,) = image_paths(build_messages(row, config)[0])
    # the browser's viewport, as the policy saw it in the rollout
    assert Image.open(image).size == (1280, 800)
    other = str(draw_screenshot(tmp_path / "other.png", "another page"))
    firsts = [
        sample_replies(model, processor, [state], config, greedy=True, max_new_tokens=1)[0][0].logprobs[0]
        for state in (row, dict(row, screenshot=other))
    ]
    assert abs(firsts[0] - firsts[1]) > 1e-4
