"""Suite-wide settings: no telemetry, no hub, one torch thread, and the shared fixtures of each area."""

import os

os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Fixtures other areas reuse (a running sandbox server, a saved tiny checkpoint) live in these plugin modules.
pytest_plugins = ["tests.fixtures_web", "tests.fixtures_model"]

#: torch's intra-op threads in the test process. One: the tiny models gain nothing from a second thread, which on a
#: 2-core machine only fights the Chromium, servers and child processes running beside them. Processes the tests
#: start (launched trainers, vLLM, ``short_sft``) choose their own.
TORCH_THREADS_ENV = "RMSWEB_TEST_TORCH_THREADS"


def pytest_configure(config) -> None:
    import torch

    torch.set_num_threads(int(os.environ.get(TORCH_THREADS_ENV, "1")))
