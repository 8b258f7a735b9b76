"""The pipeline packages' contract with each other and with the registry: no pipeline package imports another
(shared code lives in library modules; only ``pipeline_registry.py`` knows every pipeline), every package is
registered, and each recipe stage is a namespaced modular pipeline whose datasets and parameters keep their
catalog names."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

from rmsweb_kedro import pipelines as pipelines_package
from rmsweb_kedro.pipeline_registry import RECIPE, register_pipelines
from rmsweb_kedro.runs.tracking import step_prefix

PIPELINES = Path(next(iter(pipelines_package.__path__)))
PACKAGES = sorted(p.name for p in PIPELINES.iterdir() if (p / "__init__.py").is_file())


def imported_pipeline_packages(source: str, package: str) -> set[str]:
    """The pipeline packages a module of ``package`` imports (absolute or relative imports)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package's own folder (level 1) or pipelines/ (level 2)
                base = ["rmsweb_kedro", "pipelines", package][: 3 - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from rmsweb_kedro.pipelines import collect` names the package in the alias
            modules = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[:2] == ["rmsweb_kedro", "pipelines"] and len(parts) > 2 and parts[2] in PACKAGES:
                found.add(parts[2])
    return found


def test_the_scan_sees_every_form_of_import():
    source = (
        "import rmsweb_kedro.pipelines.sft.nodes\nfrom rmsweb_kedro.pipelines import collect, mining\n"
        "from rmsweb_kedro.pipelines.evaluate.nodes import x\nfrom ..trajectories import nodes\n"
        "from . import nodes\nfrom rmsweb_kedro import reporting\n"
        "def f():\n    from rmsweb_kedro.pipelines.live.nodes import y\n"
    )
    assert imported_pipeline_packages(source, "ablations") == {
        "sft", "collect", "mining", "evaluate", "trajectories", "ablations", "live"
    }  # fmt: skip


@pytest.mark.parametrize("package", PACKAGES)
def test_no_pipeline_package_imports_another(package):
    for module in sorted((PIPELINES / package).rglob("*.py")):
        others = imported_pipeline_packages(module.read_text(encoding="utf-8"), package) - {package}
        assert not others, (
            f"{module.relative_to(PIPELINES.parent)} imports the pipeline package(s) {sorted(others)}: move what "
            "they share into a library module, or compose the pipelines in pipeline_registry.py"
        )


def test_every_pipeline_package_is_registered():
    registered = register_pipelines()
    # second_round: the ablations package's second pipeline (ablations.second_round), on the default run's model
    assert set(registered) == set(PACKAGES) | {"__default__", "second_round"}
    assert list(RECIPE) == ["tasks", "collect", "trajectories", "sft_data", "sft", "mining", "salvage_ds",
                            "evaluate"]  # fmt: skip


def test_each_stage_is_a_namespaced_modular_pipeline_with_the_catalog_names():
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Namespace .* is interrupted")  # Kedro only warns
        registered = register_pipelines()
    default = registered["__default__"]
    for name, package in RECIPE.items():
        own = package.create_pipeline()
        stage = registered[name]
        assert {n.namespace for n in stage.nodes} == {name}
        assert sorted(n.name for n in stage.nodes) == sorted(f"{name}.{n.name}" for n in own.nodes)
        # Datasets and parameters are not prefixed: the stage reads and writes the same catalog entries.
        assert stage.inputs() == own.inputs() and stage.outputs() == own.outputs()
        assert set(stage.nodes) <= set(default.nodes)
    assert len(default.nodes) == sum(len(registered[name].nodes) for name in RECIPE)
    assert not any(n.namespace for n in registered["live"].nodes + registered["judge_agreement"].nodes)


def test_live_step_metrics_keep_the_node_name_under_a_stage_namespace():
    assert step_prefix("sft.train_sft", "sft") == "train_sft"
    assert step_prefix("train_sft", None) == "train_sft"
    assert (
        step_prefix("ablations.rl_grpo.salvage_ds.train_salvage_ds", "ablations.rl_grpo.salvage_ds")
        == "ablations.rl_grpo.train_salvage_ds"
    )
