#!/usr/bin/env bash
# The production path on one GPU in minutes (benchmarks/gpu_check.py): a ~2B Qwen3-VL-Instruct with random weights,
# real sandbox screenshots, SFT (full and LoRA; padded and packed batches), Salvage-DS with G=8, generation;
# tokens/s, MFU, peak memory.
# Extra arguments go to the script (e.g. --tiny for a CPU smoke run, --peak-tflops for another GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
export KEDRO_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python benchmarks/gpu_check.py "$@"
