#!/usr/bin/env bash
# Set up (when needed) and run the main job: the whole recipe on the embedded default. Extra arguments go to
# `kedro run`, e.g. `bash scripts/run.sh --pipelines trajectories`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export KEDRO_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/kedro run "$@"
