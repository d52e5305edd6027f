#!/usr/bin/env bash
# The project's test command (README command 2; .ci/run calls exactly this).
# Installs the project with dev dependencies, brings up the real localhost
# Slurm cluster, then runs lint, types and every test. Any failure exits non-zero,
# including pytest's exit 5 (no tests collected).
set -euo pipefail
cd "$(dirname "$0")/.."

# CPU build of torch from the machine's local file first: a bare range would
# pull several GB of CUDA wheels.
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e '.[dev,torch,fast]'

# Headless Chromium from the distribution for the report's browser test (about a minute
# the first time; nothing once installed). playwright drives it; it downloads no browser.
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

# Two emulated nodes so multi-node launches are tested for real.
export SLURM_LOCAL_NODES="${SLURM_LOCAL_NODES:-2}"
eval "$(scripts/slurm_local.sh up)"
export AUTOEXP_SLURM_CONF="$SLURM_CONF"
# Slurm and torch tests must run here, never skip.
export AUTOEXP_REQUIRE_SLURM=1

ruff check .
ruff format --check .
mypy
# The slowest tests, so that CI time (45 min budget) is watched at every run.
pytest --durations=30 "$@"
