"""The pipeline through Kedro in a copy of the project: the default run with no raw files, a run on the
hand-written examples, the notebook over its outputs, and ``kedro viz build``."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import polars as pl
import pytest
from nbclient import NotebookClient

from rmsweb_kedro.contracts.schema import QUARANTINE_SCHEMA, STEP_SCHEMA, TRAJECTORY_SCHEMA

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLES = PROJECT / "data" / "01_raw" / "examples" / "trajectories"
LAYERS = ["01_raw", "02_intermediate", "03_primary", "04_feature", "05_model_input", "06_models",
          "07_model_output", "08_reporting"]  # fmt: skip
OUR_CONF = ["catalog_trajectories.yml", "parameters_trajectories.yml", "globals.yml", "logging.yml"]
OUR_NODES = {
    "validate_trajectories",
    "report_ingest",
    "shorten_trajectories",
    "report_shortening",
    "plot_shortening",
}


def copy_project(destination: Path) -> Path:
    shutil.copy(PROJECT / "pyproject.toml", destination)
    (destination / "src").mkdir()  # Kedro wants it; the package itself is the installed (editable) one
    # Only this pipeline's configuration: the other pipelines' files are tested by their owners.
    for env in ("base", "local"):
        (destination / "conf" / env).mkdir(parents=True)
    for name in OUR_CONF:
        shutil.copy(PROJECT / "conf" / "base" / name, destination / "conf" / "base" / name)
    shutil.copytree(PROJECT / "notebooks", destination / "notebooks")
    for layer in LAYERS:
        (destination / "data" / layer).mkdir(parents=True)
    return destination


def kedro_run(project: Path, runtime_params: dict | None = None) -> None:
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    bootstrap_project(project)
    cwd = os.getcwd()
    os.chdir(project)  # as `kedro run` does: relative paths (raw_root) are the project's
    try:
        with KedroSession.create(project_path=project, runtime_params=runtime_params) as session:
            session.run(pipeline_name="trajectories")
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def examples_project(tmp_path_factory):
    """A project copy after `kedro run --pipeline trajectories --params trajectories.raw_root=<examples>`."""
    project = copy_project(tmp_path_factory.mktemp("examples_project"))
    kedro_run(project, {"trajectories": {"raw_root": str(EXAMPLES)}})
    return project


def test_default_run_without_raw_files_writes_empty_tables(tmp_path):
    project = copy_project(tmp_path)
    kedro_run(project)
    data = project / "data"
    assert pl.read_parquet(data / "02_intermediate" / "trajectories.parquet").schema == TRAJECTORY_SCHEMA
    assert pl.read_parquet(data / "02_intermediate" / "steps.parquet").schema == STEP_SCHEMA
    assert pl.read_parquet(data / "02_intermediate" / "quarantine.parquet").schema == QUARANTINE_SCHEMA
    assert pl.read_parquet(data / "03_primary" / "shortened_steps.parquet").height == 0
    report = json.loads((data / "08_reporting" / "ingest_report.json").read_text())
    assert (report["files"], report["records_in"], report["balanced"]) == (0, 0, True)


def test_examples_run(examples_project):
    data = examples_project / "data"
    report = json.loads((data / "08_reporting" / "ingest_report.json").read_text())
    assert (report["records_in"], report["accepted"], report["quarantined"], report["steps"]) == (3, 3, 0, 18)
    steps = pl.read_parquet(data / "02_intermediate" / "steps.parquet")
    for screenshot in steps["screenshot"].drop_nulls():
        assert (EXAMPLES / screenshot).is_file()
    shortening = pl.read_csv(data / "08_reporting" / "shortening_report.csv")
    assert shortening.select("site", "steps_before", "steps_after").rows() == [
        ("flights", 5, 5),
        ("shop", 9, 4),
        ("(all)", 14, 9),
    ]
    shortened = pl.read_parquet(data / "03_primary" / "shortened_steps.parquet").filter(
        pl.col("trajectory_id") == "shop-0001-a1"
    )
    assert shortened["action"].to_list() == ['type(1, "blue scarf", submit=true)', "click(2)", "click(3)",
                                             'answer("24.90 USD")']  # fmt: skip
    assert (data / "08_reporting" / "shortening_plot.png").stat().st_size > 1000


@pytest.mark.slow
def test_notebook_loads_steps_from_the_catalog_and_plots(examples_project):
    notebook = nbformat.read(examples_project / "notebooks" / "explore_steps.ipynb", as_version=4)
    client = NotebookClient(
        notebook,
        timeout=240,
        kernel_name="python3",
        resources={"metadata": {"path": examples_project / "notebooks"}},
    )
    client.execute()
    text = "\n".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    assert "3 trajectories, 18 steps, 13 after shortening" in text
    assert "select_option" in text and "shop" in text
    images = [
        o
        for c in notebook.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "image/png" in o.get("data", {})
    ]
    assert images, "the plotting cell drew nothing"


@pytest.mark.slow
def test_kedro_viz_build_lists_the_nodes(tmp_path):
    project = copy_project(tmp_path)
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1"}
    kedro = Path(sys.executable).parent / "kedro"
    result = subprocess.run(
        [str(kedro), "viz", "build"], cwd=project, env=env, capture_output=True, text=True, timeout=400
    )
    main = project / "build" / "api" / "main"
    assert main.is_file(), (
        f"kedro viz build wrote no build/api/main (exit {result.returncode}):\n{result.stderr[-3000:]}"
    )
    graph = json.loads(main.read_text())
    names = {node["name"] for node in graph["nodes"]}
    assert OUR_NODES <= names, names
    assert {"raw_trajectories", "steps", "shortened_steps", "quarantine"} <= names
