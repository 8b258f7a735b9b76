"""Nodes of the ``evaluate`` pipeline: each validates ``params:evaluate`` and calls the library
(:mod:`rmsweb_kedro.measures.evaluation` for the offline and online evaluation and the comparison tables,
:mod:`rmsweb_kedro.measures.report` for the claims and the report). Nodes that take no parameters are the
library's functions themselves (pipeline.py)."""

from __future__ import annotations

from itertools import islice
from typing import Any

import polars as pl

from rmsweb_kedro.measures import evaluation
from rmsweb_kedro.measures import report as evaluation_report
from rmsweb_kedro.measures.evaluation import EvaluateParams


def predict_offline(
    states: pl.DataFrame, model: Any, params: dict[str, Any], model_name: str
) -> pl.DataFrame:
    """``offline_predictions_<model>``: the model's scored greedy replies on the held-out states
    (:func:`~rmsweb_kedro.measures.evaluation.predict_offline`); a model of several training seeds
    (``{seed: model}``) is each seed's, labelled ``<model>_s<seed>`` (:func:`~rmsweb_kedro.measures.evaluation.seed_models`)."""
    config = EvaluateParams.model_validate(params)
    return pl.concat(
        [
            evaluation.predict_offline(states, loaded, config, label)
            for label, loaded in evaluation.seed_models(model, model_name)
        ]
    )


def run_online(
    tasks: pl.DataFrame,
    model: Any,
    params: dict[str, Any],
    model_name: str,
    rollouts: dict[str, Any] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``online_episodes_<model>`` and ``online_steps_<model>``: one row per judged sandbox episode and one per
    step of each (:func:`~rmsweb_kedro.measures.evaluation.run_online`, on the ``params:rollouts`` backend); for a
    model of several training seeds, each of its first ``online.max_seeds`` seeds', labelled ``<model>_s<seed>``."""
    config = EvaluateParams.model_validate(params)
    seeds = islice(evaluation.seed_models(model, model_name), config.online.max_seeds)
    runs = [evaluation.run_online(tasks, loaded, config, label, rollouts) for label, loaded in seeds]
    return pl.concat([episodes for episodes, _ in runs]), pl.concat([steps for _, steps in runs])


def offline_by_step_kind(predictions: pl.DataFrame, params: dict[str, Any]) -> pl.DataFrame:
    """``offline_by_step_kind``: offline step success per model and kind of held-out state, with intervals."""
    config = EvaluateParams.model_validate(params)
    return evaluation.step_kind_rates(predictions, config.confidence)


def online_breakdown(episodes: pl.DataFrame, params: dict[str, Any]) -> pl.DataFrame:
    """``online_breakdown``: success per model by site group, sandbox split, site and level, with intervals."""
    config = EvaluateParams.model_validate(params)
    return evaluation.online_breakdown(episodes, config.confidence)


def compare_models(offline: pl.DataFrame, episodes: pl.DataFrame, params: dict[str, Any]) -> pl.DataFrame:
    """``model_comparison``: one row per model, offline rates beside the online summary."""
    config = EvaluateParams.model_validate(params)
    return evaluation.compare_models(offline, episodes, config.confidence)


def claims_table(
    episodes: pl.DataFrame, predictions: pl.DataFrame, collection_log: pl.DataFrame, params: dict[str, Any]
) -> pl.DataFrame:
    """``claims_vs_run``: the paper's claims (``evaluate.claims``) beside this run's figures and their intervals
    (paired online differences from ``online_episodes``, paired offline ones from ``offline_predictions``, steps
    saved from ``collection_log``)."""
    config = EvaluateParams.model_validate(params)
    return evaluation_report.claims_table(episodes, predictions, collection_log, config)


def build_report(
    comparison: pl.DataFrame,
    breakdown: pl.DataFrame,
    kinds: pl.DataFrame,
    claims: pl.DataFrame,
    collection: pl.DataFrame,
    steps: pl.DataFrame,
    modes: pl.DataFrame,
    params: dict[str, Any],
    manifest: dict[str, Any] | None = None,
    ablations: str | None = None,
    salvage: dict[str, Any] | None = None,
) -> str:
    """``evaluation_report`` (report.md; :func:`~rmsweb_kedro.measures.report.build_report`), with Salvage-DS's
    runs (``salvage_ds_report``) and the ablations' section when the ablations pipeline re-renders it."""
    config = EvaluateParams.model_validate(params)
    return evaluation_report.build_report(
        comparison, breakdown, kinds, claims, collection, steps, modes, config, manifest, ablations, salvage
    )
