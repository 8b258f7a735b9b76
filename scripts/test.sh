#!/usr/bin/env bash
# Set up (when needed) and run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# vLLM's CPU build in a venv of its own, outside the clone (once per machine, ~3 min): the served-sampler tests
# run against it. RMSWEB_SKIP_VLLM=1 skips making it (those tests then skip, saying so).
[ "${RMSWEB_SKIP_VLLM:-0}" = 1 ] || bash scripts/vllm_env.sh >/dev/null
export KEDRO_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
