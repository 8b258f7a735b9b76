#!/usr/bin/env bash
# Idempotent setup on a fresh Debian machine with Python 3.11: .venv, torch (CPU build) first, the project with
# its test extras, and Debian's chromium. Fast when nothing changed (a stamp of pyproject.toml's hash).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
export KEDRO_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi

stamp=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat .venv/.setup-stamp 2>/dev/null)" != "$stamp" ]; then
  echo "setup: installing dependencies (torch first, so pip takes the CPU build)"
  .venv/bin/python -m pip install -q --upgrade pip
  torch_pin=$(grep -oE '"torch==[^"]+"' pyproject.toml | tr -d '"')
  .venv/bin/python -m pip install -q "$torch_pin"
  .venv/bin/python -m pip install -q -e '.[test]'
  echo "$stamp" > .venv/.setup-stamp
fi

# The browser: Debian's chromium, or any Chromium named by RMSWEB_CHROMIUM (e.g. Playwright's own build).
if [ -z "${RMSWEB_CHROMIUM:-}" ] && ! command -v chromium >/dev/null; then
  if command -v apt-get >/dev/null; then
    echo "setup: installing Debian's chromium"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: no chromium found and no apt-get. Install Chromium or Chrome and set RMSWEB_CHROMIUM to its" >&2
    echo "       executable (or run '.venv/bin/playwright install chromium' where downloads are possible)." >&2
    exit 1
  fi
fi
