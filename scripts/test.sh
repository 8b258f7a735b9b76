#!/usr/bin/env bash
# Set up (when needed) and run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# vLLM's CPU build in a venv of its own, outside the clone (once per machine, ~3 min): the served-sampler tests
# run against it. RMSWEB_SKIP_VLLM=1 skips making it (those tests then skip, saying so).
[ "${RMSWEB_SKIP_VLLM:-0}" = 1 ] || bash scripts/vllm_env.sh >/dev/null
export KEDRO_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Two pytest workers (pytest-xdist), each file on one worker so a module's fixtures are built once: the tests hold
# torch to one thread, and much of their time is one-core work (vLLM's and Chromium's starts, tiny models), so a
# second worker fills the second core (README: the suite's times). RMSWEB_TEST_WORKERS=0 runs
# them in this process; a later -n in the arguments wins.
exec .venv/bin/python -m pytest -n "${RMSWEB_TEST_WORKERS:-2}" --dist loadfile "$@"
