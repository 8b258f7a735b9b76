"""A signalled ``kedro run`` leaves no process behind: a real ``kedro run`` (a subprocess, in a copy of the project)
whose mining node has started a managed vLLM server (vLLM's CPU build, ``scripts/vllm_env.sh``), or whose collect
node drives Chromium, is sent SIGTERM (what a scheduler sends) or SIGINT, as a process alone, not its group; then no
process of the run is left (models/processes.py, runs/hooks/shutdown.py). Before, the server, in a process group of its own,
was stopped only by ``finally`` and ``atexit``, which a SIGTERM skips."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import psutil
import pytest

import rmsweb_kedro

pytestmark = pytest.mark.slow
PROJECT = Path(__file__).resolve().parents[2]


def make_project(project: Path, lora_policy: tuple) -> Path:
    """A copy of the project's configuration with SFT's outputs that mining reads: 8 toy states (train 6, probe 2)
    and a LoRA sft_model of head_dim 32 (what vLLM's CPU attention takes), served by the node on vLLM's CPU build.
    Returns the checkpoint directory."""
    from rmsweb_kedro.contracts.schema import STATE_SCHEMA
    from rmsweb_kedro.models.modeling import save_checkpoint
    from tests.salvage_ds.test_served import server_config

    shutil.copy(PROJECT / "pyproject.toml", project)
    (project / "src").mkdir()
    shutil.copytree(PROJECT / "conf" / "base", project / "conf" / "base")
    (project / "conf" / "local").mkdir()
    model, processor, states, prompt = lora_policy
    frame = pl.DataFrame(states, schema=STATE_SCHEMA)
    data = project / "data" / "05_model_input" / "sft"
    data.mkdir(parents=True)
    frame.head(6).write_parquet(data / "sft_states_train.parquet")
    frame.tail(2).write_parquet(data / "sft_states_probe.parquet")
    checkpoint = project / "data" / "06_models" / "sft_model" / "2026-12-06T00.00.00.000Z" / "sft_model"
    save_checkpoint(model, processor, checkpoint)
    server = server_config().model_dump(mode="json", exclude={"model", "api_key"})
    params = {
        "tracking": {"enabled": False},
        "mining": {
            "policy": {"kind": "openai", "prompt": prompt.model_dump(mode="json"), "server": server},
            "scoring": {"k": 2, "max_new_tokens": 8, "batch_size": 8},
            "max_states_probed": 8,
        },
    }
    (project / "conf" / "local" / "parameters_served.yml").write_text(json.dumps(params))  # JSON is YAML
    return checkpoint


def serving(pattern: str) -> list[psutil.Process]:
    """Live processes (zombies aside) whose command line names ``pattern``."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["status"] != psutil.STATUS_ZOMBIE and pattern in " ".join(
            process.info["cmdline"] or []
        ):
            found.append(process)
    return found


def start_run(project: Path, *args: str) -> subprocess.Popen:
    """``kedro run ARGS`` in ``project``, its output in ``project/kedro.log``."""
    env = os.environ | {
        "KEDRO_DISABLE_TELEMETRY": "1",
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "300",  # Kedro's rich log lines unwrapped
        # the package under test, not the venv's editable install of another checkout
        "PYTHONPATH": os.pathsep.join(
            [str(Path(rmsweb_kedro.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    kedro = Path(sys.executable).parent / "kedro"
    with (project / "kedro.log").open("wb") as log:
        return subprocess.Popen(
            [str(kedro), "run", *args], cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT
        )


def wait_for(run: subprocess.Popen, project: Path, ready, what: str, timeout_s: float = 400) -> None:
    """Until ``ready()``; fails with the run's output if it ended first, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert run.poll() is None, (project / "kedro.log").read_text()[-3000:]
        assert time.monotonic() < deadline, f"{what} did not start within {timeout_s:.0f} s"
        time.sleep(0.3)


def signal_and_wait(
    run: subprocess.Popen, signum: int, started: list[psutil.Process]
) -> tuple[int, float, float, list]:
    """Send ``signum`` to the run's process alone; its exit code, seconds until it exited and until every process
    of ``started`` was gone, and those still alive after 60 s."""
    signalled = time.monotonic()
    os.kill(run.pid, signum)  # the process alone, as a scheduler signals it
    code = run.wait(timeout=120)
    exited = time.monotonic() - signalled
    _, alive = psutil.wait_procs(started, timeout=60)
    return code, exited, time.monotonic() - signalled, alive


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_run_stops_the_vllm_server_it_started(signum, tmp_path, lora_policy):
    from tests.salvage_ds.test_served import vllm_python

    vllm_python()  # skips when there is no vLLM venv
    checkpoint = make_project(tmp_path, lora_policy)
    run = start_run(tmp_path, "--nodes", "mining.prepare_mining_corpus,mining.probe_offline")
    server_log = tmp_path / "data" / "07_model_output" / "mining" / "servers" / "offline.log"
    try:
        wait_for(
            run,
            tmp_path,
            lambda: (
                server_log.exists()
                and "Application startup complete" in server_log.read_text(errors="replace")
            ),
            "vLLM",
        )
        started = psutil.Process(run.pid).children(recursive=True)
        assert any("vllm" in " ".join(p.cmdline()) for p in started), [p.cmdline() for p in started]
        assert serving(str(checkpoint))  # the server of this run's checkpoint is up
        code, exited, gone, alive = signal_and_wait(run, signum, started)
    finally:
        if run.poll() is None:
            run.kill()
        for process in serving(str(checkpoint)):  # a failed test's leftovers: servers of its own checkpoint
            process.kill()
    output = (tmp_path / "kedro.log").read_text(errors="replace")
    assert alive == [], f"left behind: {[p.cmdline() for p in alive]}\n{output[-3000:]}"
    assert serving(str(checkpoint)) == []
    assert f"{signal.Signals(signum).name}: stopping the servers and browsers this run started" in output
    assert code != 0, output[-3000:]  # stopped, not finished
    print(f"{signal.Signals(signum).name}: kedro exited {exited:.1f} s after the signal (code {code}); all "
          f"{len(started)} processes it had started gone after {gone:.1f} s")  # fmt: skip


@pytest.mark.browser
def test_a_signalled_collection_closes_its_browsers(tmp_path):
    """``kedro run --pipelines tasks,collect`` (the sandbox, the scripted teacher, Chromium through Playwright),
    SIGTERM once a browser runs: Chromium, its Playwright driver and everything else the run started are gone."""
    from tests.fixtures_web import chromium_available

    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    shutil.copy(PROJECT / "pyproject.toml", tmp_path)
    (tmp_path / "src").mkdir()
    shutil.copytree(PROJECT / "conf" / "base", tmp_path / "conf" / "base")
    (tmp_path / "conf" / "local").mkdir()
    params = {"tracking": {"enabled": False}, "collect": {"max_tasks": 20, "n_envs": 2, "progress": False}}
    (tmp_path / "conf" / "local" / "parameters_run.yml").write_text(json.dumps(params))
    run = start_run(tmp_path, "--pipelines", "tasks,collect")

    def browsers() -> list[psutil.Process]:
        """Chromium launched by Playwright (a group of its own; not the run manifest's ``chromium --version``)."""
        found = []
        for process in psutil.Process(run.pid).children(recursive=True):
            try:
                if "chrom" in process.name().lower() and os.getpgid(process.pid) != run.pid:
                    found.append(process)
            except (psutil.NoSuchProcess, ProcessLookupError):  # ended while listed
                pass
        return found

    try:
        # a browser at work: its main process with its zygotes and a renderer
        wait_for(run, tmp_path, lambda: len(browsers()) >= 4, "Chromium", timeout_s=300)
        started = psutil.Process(run.pid).children(recursive=True)
        n_browser = sum(process in started for process in browsers())
        assert n_browser >= 4
        code, exited, gone, alive = signal_and_wait(run, signal.SIGTERM, started)
    finally:
        if run.poll() is None:
            run.kill()
    output = (tmp_path / "kedro.log").read_text(errors="replace")
    for process in alive:  # this test's own leftovers
        process.kill()
    assert alive == [], f"left behind: {[p.cmdline()[:2] for p in alive]}\n{output[-3000:]}"
    assert "SIGTERM: stopping the servers and browsers this run started" in output
    assert code != 0, output[-3000:]
    print(f"SIGTERM during collection: kedro exited {exited:.1f} s after the signal (code {code}); all "
          f"{len(started)} processes it had started ({n_browser} Chromium) "
          f"gone after {gone:.1f} s")  # fmt: skip
