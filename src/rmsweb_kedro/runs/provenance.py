"""The run manifest: what a reader needs to trace a number back to the run that made it.

A :class:`RunManifest` names the code (git commit, uncommitted changes), the packages (versions, and the Chromium
build), the seeds (every ``seed`` parameter the run's pipelines read), the checkpoints read or written (path and
content hash), the judges whose verdicts the run's tables hold, the hardware (CPU model, instruction sets, torch's
threads and kernels), the Kedro command and the MLflow run id. The provenance hook (``runs/hooks/provenance.py``)
fills one per ``kedro run`` and saves it as the ``run_manifest`` dataset; the report starts with
:func:`manifest_markdown`.

Secrets never enter a manifest (or MLflow): :func:`mask_secrets` replaces every value under a key that names a
secret, and API keys are :class:`pydantic.SecretStr` (``models/endpoint.py``), which dump as ``**********``.
"""

from __future__ import annotations

import hashlib
import platform
import re
import subprocess
from collections.abc import Iterable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.models.numerics import KERNEL_ENV, cpu_model

#: The distributions whose versions decide what a run computes (torch first: its build names CPU/CUDA).
PACKAGES = ("torch", "transformers", "tokenizers", "accelerate", "peft", "kedro", "kedro-datasets",
            "kedro-mlflow", "mlflow", "polars", "pyarrow", "pydantic", "playwright", "openai", "rmsweb_kedro")  # fmt: skip
#: Keys whose values are secrets wherever they appear in parameters (case-insensitive, anywhere in the key).
SECRET_KEY = re.compile(
    r"api_?key|secret|passw(or)?d|(auth|access|bearer)_?token|authorization", re.IGNORECASE
)
MASK = "**********"  # what pydantic's SecretStr dumps as


class CheckpointRecord(BaseModel):
    """One checkpoint directory the run read or wrote."""

    model_config = ConfigDict(extra="forbid")

    path: str
    sha256: str  # over the sorted relative file names and their contents (:func:`directory_sha256`)
    files: int
    bytes: int
    role: str  # "saved" or "loaded"


class RunManifest(BaseModel):
    """The provenance of one ``kedro run``; every field is filled by :func:`start_manifest` or the run's hooks."""

    model_config = ConfigDict(extra="forbid")

    created_utc: str
    command: str
    pipelines: list[str]
    env: str | None = None
    git_commit: str | None  # None outside a git checkout
    git_dirty: bool | None  # uncommitted changes to tracked files
    packages: dict[str, str]
    python: str
    hardware: dict[str, Any]
    seeds: dict[str, int]
    checkpoints: dict[str, CheckpointRecord] = Field(default_factory=dict)  # catalog name -> record
    judges: list[str] = Field(default_factory=list)  # distinct judge specs of the verdicts the run wrote
    mlflow_run_id: str | None = None
    mlflow_tracking_uri: str | None = None


def git_state(path: str | Path) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout holding ``path``; ``(None, None)`` outside one."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=path, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, dirty


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed version of each distribution (``"not installed"`` when absent)."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def chromium_version() -> str:
    """The version of the Chromium the browsers run (``RMSWEB_CHROMIUM`` or ``web.browser``'s default): the pages
    it renders are the observations collected, so another build can collect other data."""
    import os

    from rmsweb_kedro.web.browser import BrowserConfig

    path = os.environ.get("RMSWEB_CHROMIUM") or BrowserConfig().executable
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "not installed"
    match = re.search(r"\d+(\.\d+)+", out)
    return match.group(0) if match else "unknown"


def hardware() -> dict[str, Any]:
    """Machine, CPU model and instruction sets, CPU count, torch's threads and kernel ISA, and, when torch sees
    them, the accelerators (name, memory). Two CPUs with different instruction sets run different BLAS/oneDNN
    kernels, so a run reproduces bit for bit only on the same ``cpu_flags`` (README, "What the default run
    gives")."""
    import os

    model, flags = cpu_model()
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "system": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "cpu_flags": flags,
        "kernel_env": {name: os.environ[name] for name in KERNEL_ENV if name in os.environ},
    }
    try:
        import torch
    except ImportError:
        return info
    from rmsweb_kedro.models.numerics import numerics_record

    info["numerics"] = numerics_record()  # the kernel pins and what mixed_precision: auto runs as here
    info["torch_threads"] = torch.get_num_threads()
    info["torch_interop_threads"] = torch.get_num_interop_threads()
    info["torch_cpu_capability"] = (
        torch.backends.cpu.get_cpu_capability()
    )  # ATen's kernels: AVX2, AVX512, ...
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    onednn = re.search(r"MKL-DNN (v[\d.]+)", config)
    info["torch_blas"] = blas.group(1) if blas else None
    info["torch_onednn"] = onednn.group(1) if onednn else None
    if torch.cuda.is_available():
        info["gpus"] = [
            f"{torch.cuda.get_device_name(i)} ({torch.cuda.get_device_properties(i).total_memory / 2**30:.0f} GiB)"
            for i in range(torch.cuda.device_count())
        ]
    else:
        info["gpus"] = []
    return info


def seeds(parameters: dict[str, Any], prefix: str = "", read: Iterable[str] | None = None) -> dict[str, int]:
    """Every integer parameter whose key ends in ``seed``, by dotted path (``sft.training.loop.seed``).

    ``read``: the parameters the pipelines that ran read (their ``params:NAME`` inputs, ``parameters`` for all):
    only seeds at or under one of them are listed, so a default run does not list the ablations' seeds."""
    found: dict[str, int] = {}
    for key, value in parameters.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            found |= seeds(value, f"{path}.")
        elif str(key).endswith("seed") and isinstance(value, int) and not isinstance(value, bool):
            found[path] = value
    if read is None:
        return found
    names = {
        name.removeprefix("params:") for name in read if name.startswith("params:") or name == "parameters"
    }
    if "parameters" in names:
        return found
    return {path: v for path, v in found.items() if any(path == n or path.startswith(f"{n}.") for n in names)}


def mask_secrets(value: Any) -> Any:
    """``value`` with every entry under a secret-naming key (:data:`SECRET_KEY`) replaced by :data:`MASK`, and
    every ``SecretStr`` too, so a parameters dict can be logged or dumped safely."""
    from pydantic import SecretBytes, SecretStr

    if isinstance(value, SecretStr | SecretBytes):
        return MASK
    if isinstance(value, dict):
        return {
            k: (MASK if v is not None and SECRET_KEY.search(str(k)) else mask_secrets(v))
            for k, v in value.items()
        }
    if type(value) in (list, tuple):  # not NamedTuples and other sequences: those are data, not parameters
        return type(value)(mask_secrets(v) for v in value)
    return value


def directory_sha256(path: str | Path) -> tuple[str, int, int]:
    """``(sha256, files, bytes)`` of a file or directory: the hash runs over each file's relative path and
    contents, in sorted order, so the same checkpoint anywhere on disk hashes the same."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    digest, total = hashlib.sha256(), 0
    for file in files:
        digest.update(file.relative_to(root).as_posix().encode() if root.is_dir() else file.name.encode())
        digest.update(b"\0")
        with open(file, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                total += len(chunk)
    return digest.hexdigest(), len(files), total


def checkpoint_record(path: str | Path, role: str) -> CheckpointRecord:
    sha, files, size = directory_sha256(path)
    return CheckpointRecord(path=str(path), sha256=sha, files=files, bytes=size, role=role)


def start_manifest(
    project_path: str | Path,
    parameters: dict[str, Any],
    command: str,
    pipelines: list[str],
    env: str | None = None,
    read_parameters: Iterable[str] | None = None,
) -> RunManifest:
    """The manifest at the start of a run: code, packages, seeds and hardware (checkpoints, judges and the MLflow
    run are added as the run goes). ``read_parameters``: the run's pipeline inputs; the seeds listed are those
    they read (:func:`seeds`)."""
    import sys

    commit, dirty = git_state(project_path)
    return RunManifest(
        created_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        command=command,
        pipelines=pipelines,
        env=env,
        git_commit=commit,
        git_dirty=dirty,
        packages=package_versions() | {"chromium": chromium_version()},
        python=sys.version.split()[0],
        hardware=hardware(),
        seeds=seeds(parameters, read=read_parameters),
    )


#: The Parquet file-metadata key holding the manifest in every reporting table the run writes.
PARQUET_KEY = b"rmsweb_run_manifest"


def stamp_parquet(path: str | Path, manifest: RunManifest) -> None:
    """Write ``manifest`` (JSON) into the key-value metadata of the Parquet file at ``path``; the data, and how
    polars reads it, are unchanged."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    metadata = dict(table.schema.metadata or {}) | {PARQUET_KEY: manifest.model_dump_json().encode()}
    pq.write_table(table.replace_schema_metadata(metadata), path)


def read_parquet_manifest(path: str | Path) -> RunManifest | None:
    """The manifest :func:`stamp_parquet` wrote into a Parquet file, or None."""
    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(PARQUET_KEY)
    return RunManifest.model_validate_json(raw) if raw else None


def _numerics_row(numerics: dict[str, Any] | None) -> str:
    if not numerics:
        return "not recorded"
    pins = ", ".join(f"{k}={v}" for k, v in numerics["kernel_pins"].items()) or "none"
    return (
        f"{numerics['cpu_kernels']} CPU kernels ({pins}); mixed_precision auto = "
        f"{numerics['mixed_precision_auto']} here (models/numerics.py)"
    )


def manifest_markdown(manifest: dict[str, Any] | RunManifest | None) -> str:
    """The manifest as the report's first section (a short table, then checkpoints and judges)."""
    if manifest is None:
        return "## Run manifest\n\n_(no manifest: the run was not started through `kedro run`)_"
    m = RunManifest.model_validate(manifest)
    commit = (m.git_commit or "not a git checkout") + (" (with uncommitted changes)" if m.git_dirty else "")
    hw = m.hardware
    gpus = ", ".join(hw.get("gpus") or []) or "none"
    rows = [
        ("command", f"`{m.command}`" + (f" (env {m.env})" if m.env else "")),
        ("started (UTC)", m.created_utc),
        ("git commit", f"`{commit}`"),
        (
            "MLflow run",
            f"`{m.mlflow_run_id}` in `{m.mlflow_tracking_uri}`" if m.mlflow_run_id else "tracking off",
        ),
        (
            "hardware",
            f"{hw.get('cpus')} CPUs ({hw.get('machine')}, {hw.get('cpu_model') or 'model unknown'}; torch "
            f"{hw.get('torch_threads', '?')} threads, {hw.get('torch_cpu_capability', '?')} kernels), GPUs: {gpus}",
        ),
        ("CPU instruction sets", " ".join(hw.get("cpu_flags") or []) or "not recorded"),
        ("numerics", _numerics_row(hw.get("numerics"))),
        ("python / packages", f"{m.python}; " + ", ".join(f"{k} {v}" for k, v in m.packages.items())),
        ("seeds", ", ".join(f"{k}={v}" for k, v in m.seeds.items()) or "none"),
        ("judges", "; ".join(f"`{j}`" for j in m.judges) or "none recorded"),
    ]
    lines = ["## Run manifest", "", "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    if m.checkpoints:
        lines += ["", "| checkpoint | role | path | sha256 | files | MB |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {name} | {c.role} | `{c.path}` | `{c.sha256[:16]}…` | {c.files} | {c.bytes / 1e6:.1f} |"
            for name, c in m.checkpoints.items()
        ]
    return "\n".join(lines)
