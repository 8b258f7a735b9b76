"""Suite-wide settings: no telemetry, no hub, and the shared fixtures of each area."""

import os

os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Fixtures other areas reuse (a running sandbox server, a saved tiny checkpoint) live in these plugin modules.
pytest_plugins = ["tests.fixtures_web", "tests.fixtures_model"]
