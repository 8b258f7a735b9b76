"""The tasks and propose pipelines' wiring against the catalog and parameters (base and production)."""

from __future__ import annotations

import pytest
from kedro.config import OmegaConfigLoader

from rmsweb_kedro.pipelines.propose.pipeline import create_pipeline as propose_pipeline
from rmsweb_kedro.pipelines.tasks.pipeline import create_pipeline as tasks_pipeline
from rmsweb_kedro.settings import CONFIG_LOADER_ARGS
from rmsweb_kedro.tasks.proposer import ProposerParams
from rmsweb_kedro.tasks.sources import TasksParams
from tests.collect.test_pipeline import CONF


def config(env: str):
    loader = OmegaConfigLoader(
        conf_source=str(CONF),
        base_env="base",
        default_run_env=env,
        merge_strategy={"parameters": "soft"},
        custom_resolvers=CONFIG_LOADER_ARGS["custom_resolvers"],
    )
    return loader["catalog"], loader["parameters"]


@pytest.mark.parametrize("env", ["base", "production"])
def test_every_dataset_is_declared_and_parameters_validate(env):
    catalog, parameters = config(env)
    for pipeline in (tasks_pipeline(), propose_pipeline()):
        for name in pipeline.inputs() | pipeline.all_outputs():
            if not name.startswith("params:") and name != "endpoint_credentials":
                assert name in catalog, f"{name} is not in the catalog"
    tasks = TasksParams.model_validate(parameters["tasks"])
    ProposerParams.model_validate(parameters["propose"])
    assert catalog["proposed_tasks"]["filepath"] == tasks.proposed
    if env == "base":
        assert tasks == TasksParams(), "the YAML defaults are the model's"
        assert tasks.sources == ["sandbox"]
