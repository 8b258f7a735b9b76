"""Mining against real policies in the real sandbox: the online path end to end, and a policy trained without one
site, whose states mining must single out."""

from __future__ import annotations

import polars as pl
import pytest

from rmsweb_kedro.mining import FailureMode
from rmsweb_kedro.schema import tasks_to_frame
from tests.mining.conftest import WEAK_SITE

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_online_probing_end_to_end(mining_tasks, reference_states, tiny_checkpoint):
    """An untrained policy rolled out in the sandbox fails; its first divergence from the reference becomes a
    probed STATE row carrying the reference action."""
    from rmsweb_kedro.modeling import load_model
    from rmsweb_kedro.pipelines.mining.nodes import probe_online

    task = next(t for t in mining_tasks if t.site == WEAK_SITE)
    params = {"k": 2, "max_new_tokens": 8, "online": {"rollouts": 1, "max_steps": 3}}
    probes, rollouts = probe_online(
        tasks_to_frame([task]),
        reference_states,
        load_model({"path": str(tiny_checkpoint)}),
        params,
        {},
        {"seed": 0},
    )
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
    assert row["failure_mode"] == FailureMode.INVALID_FORMAT.value


def test_mining_finds_the_weak_site(reference_states, weak_policy_dir):
    from rmsweb_kedro.modeling import load_model
    from rmsweb_kedro.pipelines.mining.nodes import prepare_corpus, probe_offline, select_critical_states

    params = {
        "k": 4, "max_new_tokens": 48, "batch_size": 16, "max_states_probed": None, "competence_threshold": 0.5,
        "ballast_share": 0.0, "online": {"rollouts": 0},
    }  # fmt: skip
    corpus = prepare_corpus(reference_states, params)
    probes = probe_offline(corpus, load_model({"path": str(weak_policy_dir)}), params, {})
    mined = select_critical_states(
        probes, probes.clear().with_columns(pl.lit("online").alias("source")), params
    )
    weak = pl.col("site") == WEAK_SITE
    competence = {
        "weak": probes.filter(weak)["competence"].mean(),
        "trained": probes.filter(~weak)["competence"].mean(),
    }
    assert competence["weak"] + 0.3 < competence["trained"], competence
    weak_share_corpus = probes.filter(weak).height / probes.height
    weak_share_mined = mined.filter(weak).height / mined.height
    assert weak_share_mined > weak_share_corpus, (weak_share_mined, weak_share_corpus)
    assert mined.filter(weak).height >= 0.75 * probes.filter(weak).height
