#!/usr/bin/env bash
# Set up (when needed) and run the main job: the whole recipe on the embedded default. Extra arguments go to
# `kedro run`, e.g. `bash scripts/run.sh --pipelines trajectories`. The run is also an MLflow run in mlruns/
# (unless --params tracking.enabled=false); the last lines say how to open it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export KEDRO_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/kedro run "$@"
if [ -f data/08_reporting/run_manifest.json ]; then
  .venv/bin/python - <<'PY'
import json

manifest = json.load(open("data/08_reporting/run_manifest.json"))
print(f"\nRun manifest: data/08_reporting/run_manifest.json (git {manifest['git_commit']}); "
      "the report (data/08_reporting/report.md) starts with it.")
if manifest["mlflow_run_id"]:
    print(f"MLflow run {manifest['mlflow_run_id']} in {manifest['mlflow_tracking_uri']}. Open it with\n"
          "  PATH=.venv/bin:$PATH .venv/bin/kedro mlflow ui     # then http://127.0.0.1:5000\n"
          "Compare runs: .venv/bin/python -m rmsweb_kedro.runs.compare RUN_ID_A RUN_ID_B")
PY
fi
