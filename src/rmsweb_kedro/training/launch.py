"""Several processes for a training (SFT or Salvage-DS), one design for both.

A node that is told ``launch: <name>`` writes a job file (model dir, data files, the trainer's config), starts the
trainer module's entry point under ``accelerate launch --config_file <accelerate_dir>/<name>.yaml`` and waits; every
process runs the same shared loop; the main process saves ``<output_dir>/final`` (the full state dict gathered from
FSDP/ZeRO-3 shards; a LoRA policy as base + adapter), ``history.jsonl`` and ``result.json``, which the node reads
back as a :class:`~rmsweb_kedro.training.loop.LoopResult`. Checkpoints go to ``<output_dir>/checkpoints`` as in one
process, so a launched run with ``loop.resume: true`` continues where an interrupted one stopped.

Names shipped in ``conf/base/accelerate/``: ``single_gpu``, ``ddp`` (8 GPUs), ``fsdp2``, ``deepspeed_zero3``,
``multi_node`` (data parallel, 2 x 8 GPUs, run on every machine), ``multi_node_fsdp2`` (FSDP2, 2 x 8 GPUs),
``cpu_2proc`` and ``cpu_2proc_fsdp2`` (2 CPU processes, gloo: the tests).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from rmsweb_kedro.training.loop import LoopResult

logger = logging.getLogger(__name__)


def launch_command(name: str, accelerate_dir: str | Path, module: str, job_path: Path) -> list[str]:
    """The ``accelerate launch`` command line running ``module``'s entry point on ``job_path``."""
    config_file = Path(accelerate_dir) / f"{name}.yaml"
    if not config_file.exists():
        raise FileNotFoundError(f"accelerate config {config_file} (launch={name!r}) not found")
    return [
        sys.executable,  # the accelerate of this environment, whatever PATH holds
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config_file),
        "-m",
        module,
        "--job",
        str(job_path),
    ]


def run_launched(name: str, accelerate_dir: str | Path, module: str, job: dict[str, Any]) -> LoopResult:
    """Write ``job`` to ``<job['output_dir']>/launch/job.json``, run ``module`` on it under ``accelerate launch``
    and return what its main process saved (:func:`save_launched`), the model loaded with ``modeling.load_model``."""
    from rmsweb_kedro.models.modeling import load_model

    output_dir = Path(job["output_dir"])
    job_path = output_dir / "launch" / "job.json"
    job_path.parent.mkdir(parents=True, exist_ok=True)
    job_path.write_text(json.dumps(job, indent=2))
    command = launch_command(name, accelerate_dir, module, job_path)
    logger.info("launching: %s", " ".join(command))
    subprocess.run(command, check=True)
    summary = json.loads((output_dir / "result.json").read_text())
    history = [json.loads(line) for line in (output_dir / "history.jsonl").read_text().splitlines()]
    model, _ = load_model({"path": str(output_dir / "final")})
    return LoopResult(
        model, summary["step"], history, summary["resumed_from"], summary["stopped_early"],
        best_step=summary.get("best_step"), best_value=summary.get("best_value"),
        stop_reason=summary.get("stop_reason"),
    )  # fmt: skip


def job_checkpoint(model_dir: str | Path, base_checkpoint: Any = None) -> dict[str, Any]:
    """The load config a launched entry point loads ``model_dir`` (the node's saved copy of the policy) with: every
    field of the node's ``base_checkpoint`` (``modeling.LoadConfig``: ``attn_implementation``, ``dtype``, ...) but
    ``path``, which becomes ``model_dir``; ``lora``, whose adapter the saved copy holds already (with its settings,
    trainable: ``modeling.load_model``); and ``device``, which is each process's own accelerator."""
    from rmsweb_kedro.models.modeling import LoadConfig

    spec = LoadConfig.model_validate(base_checkpoint or {"path": str(model_dir)})
    return spec.model_copy(update={"path": str(model_dir), "lora": None, "device": "auto"}).model_dump(
        mode="json"
    )


def load_job_model(job: dict[str, Any]):
    """``(model, processor)`` of a job: its ``checkpoint`` load config (:func:`job_checkpoint`), or ``model_dir``
    alone. ``dtype: auto`` trains in ``modeling.training_dtype`` (float32 master weights for full weights, bf16
    compute through ``mixed_precision``; the frozen base of a LoRA policy in the device's dtype); an explicit dtype is
    used as given, as in one process."""
    from rmsweb_kedro.models.modeling import LoadConfig, load_model, training_dtype

    spec = LoadConfig.model_validate(job.get("checkpoint") or {"path": job["model_dir"]})
    if spec.dtype == "auto":
        spec = spec.model_copy(update={"dtype": training_dtype(spec.path)})
    return load_model(spec)


def read_job(description: str) -> dict[str, Any]:
    """The job of an entry point's ``--job JOB.json`` argument."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--job", required=True, help="JSON job file written by training.launch.run_launched")
    return json.loads(Path(parser.parse_args().job).read_text())


def save_launched(result: LoopResult, processor, output_dir: str | Path) -> None:
    """In every process of a launched run: gather the weights, and on the main process save ``final``,
    ``history.jsonl`` and ``result.json`` under ``output_dir``."""
    from rmsweb_kedro.models.modeling import save_checkpoint

    accelerator, output_dir = result.accelerator, Path(output_dir)
    state_dict = accelerator.get_state_dict(result.model)  # a collective: every process takes part
    if accelerator.is_main_process:
        save_checkpoint(result.model, processor, output_dir / "final", state_dict=state_dict)
        with open(output_dir / "history.jsonl", "w") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in result.history)
        summary = {
            "step": result.step,
            "resumed_from": result.resumed_from,
            "stopped_early": result.stopped_early,
            "best_step": result.best_step,
            "best_value": result.best_value,
            "stop_reason": result.stop_reason,
        }
        (output_dir / "result.json").write_text(json.dumps(summary))
    accelerator.wait_for_everyone()
