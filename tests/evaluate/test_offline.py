"""Offline evaluation with a real (tiny, untrained) Qwen3-VL checkpoint through HFPolicy: every chosen held-out
state gets a reply, scored against its reference; the same states for every model."""

from __future__ import annotations

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import STATE_SCHEMA
from rmsweb_kedro.measures.evaluation import OFFLINE_PREDICTION_SCHEMA, offline_metrics, step_kind
from rmsweb_kedro.measures.scoring import score_step
from rmsweb_kedro.pipelines.evaluate import nodes

pytestmark = pytest.mark.slow


def test_every_chosen_state_is_replied_to_and_scored(tiny_checkpoint, tiny_states):
    states = pl.DataFrame(tiny_states[:30], schema=STATE_SCHEMA)
    params = {"offline": {"max_states": 3}, "policy": {"max_new_tokens": 8, "batch_size": 3}}
    predictions = nodes.predict_offline(states, tiny_checkpoint, params, model_name="base")
    assert predictions.schema == OFFLINE_PREDICTION_SCHEMA
    assert predictions.height == 3 and set(predictions["model"]) == {"base"}
    assert set(predictions["state_id"]) <= set(states["state_id"])
    drawn = states.join(predictions.select("state_id", "step_kind"), on="state_id")
    assert drawn["step_kind"].to_list() == [
        step_kind(s["reference_action"], s["axtree"], s["instruction"]) for s in drawn.iter_rows(named=True)
    ]
    # Replies are the model's own text, scored as scoring.score_step scores them.
    for row in predictions.iter_rows(named=True):
        assert row | score_step(row["reference_action"], row["reply"]).row() == row

    from rmsweb_kedro.models.modeling import LoadedModel, load_model

    loaded = LoadedModel(*load_model({"path": str(tiny_checkpoint)}))  # as the checkpoint dataset loads it
    again = nodes.predict_offline(states, loaded, params, model_name="sft")
    assert again["state_id"].to_list() == predictions["state_id"].to_list()  # the same draw for every model
    assert again["reply"].to_list() == predictions["reply"].to_list()  # greedy: the same weights say the same
    metrics = offline_metrics(pl.concat([predictions, again]))
    assert metrics["model"].to_list() == ["base", "sft"] and (metrics["n_states"] == 3).all()
    assert metrics["invalid_format_rate"][0] == pytest.approx((~predictions["valid"]).mean())
