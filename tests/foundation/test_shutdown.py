"""A signalled ``kedro run`` leaves no process behind: a real ``kedro run`` (a subprocess, in a copy of the project)
whose mining node has started a managed vLLM server (vLLM's CPU build, ``scripts/vllm_env.sh``) is sent SIGTERM
(what a scheduler sends) or SIGINT, as a process alone, not its group; then no process of the run is left
(processes.py, hooks.ShutdownHooks). Before, the server, in a process group of its own, was stopped only by
``finally`` and ``atexit``, which a SIGTERM skips."""

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


def make_project(project: Path) -> Path:
    """A copy of the project's configuration with SFT's outputs that mining reads: 8 toy states (train 6, probe 2)
    and a LoRA sft_model of head_dim 32 (what vLLM's CPU attention takes), served by the node on vLLM's CPU build.
    Returns the checkpoint directory."""
    from rmsweb_kedro.modeling import save_checkpoint
    from rmsweb_kedro.schema import STATE_SCHEMA
    from tests.salvage_ds.conftest import lora_tiny
    from tests.salvage_ds.test_served import server_config

    shutil.copy(PROJECT / "pyproject.toml", project)
    (project / "src").mkdir()
    shutil.copytree(PROJECT / "conf" / "base", project / "conf" / "base")
    (project / "conf" / "local").mkdir()
    model, processor, states, prompt = lora_tiny()
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


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_run_stops_the_vllm_server_it_started(signum, tmp_path):
    from tests.salvage_ds.test_served import vllm_python

    vllm_python()  # skips when there is no vLLM venv
    checkpoint = make_project(tmp_path)
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
    log = (tmp_path / "kedro.log").open("wb")
    run = subprocess.Popen(
        [str(kedro), "run", "--nodes", "mining.prepare_mining_corpus,mining.probe_offline"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    server_log = tmp_path / "data" / "07_model_output" / "mining" / "servers" / "offline.log"
    try:
        deadline = time.monotonic() + 400
        while not (
            server_log.exists() and "Application startup complete" in server_log.read_text(errors="replace")
        ):
            assert run.poll() is None, (tmp_path / "kedro.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "vLLM did not start within 400 s"
            time.sleep(0.5)
        started = psutil.Process(run.pid).children(recursive=True)
        assert any("vllm" in " ".join(p.cmdline()) for p in started), [p.cmdline() for p in started]
        assert serving(str(checkpoint))  # the server of this run's checkpoint is up

        signalled = time.monotonic()
        os.kill(run.pid, signum)  # the process alone, as a scheduler signals it
        code = run.wait(timeout=120)
        exited = time.monotonic() - signalled
        _, alive = psutil.wait_procs(started, timeout=60)
        gone = time.monotonic() - signalled
    finally:
        if run.poll() is None:
            run.kill()
        log.close()
        for process in serving(str(checkpoint)):  # a failed test's leftovers: servers of its own checkpoint
            process.kill()
    output = (tmp_path / "kedro.log").read_text(errors="replace")
    assert alive == [], f"left behind: {[p.cmdline() for p in alive]}\n{output[-3000:]}"
    assert serving(str(checkpoint)) == []
    assert f"{signal.Signals(signum).name}: stopping the servers and browsers this run started" in output
    assert code != 0, output[-3000:]  # stopped, not finished
    print(f"{signal.Signals(signum).name}: kedro exited {exited:.1f} s after the signal (code {code}); all "
          f"{len(started)} processes it had started gone after {gone:.1f} s")  # fmt: skip
