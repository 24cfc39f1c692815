#!/usr/bin/env bash
# Runs the test suite (or builds the site) on a GPU machine that has its own
# CUDA build of torch and no network, installing the Python tools from a
# wheelhouse made beforehand by tools/make_wheelhouse.py.
#
#   tools/gpu_suite.sh tests [WHEELHOUSE [PYTEST ARGS...]]   # default wheelhouse: .whl
#   tools/gpu_suite.sh docs  [WHEELHOUSE]
#
# Extra arguments go to pytest (e.g. `tools/gpu_suite.sh tests .whl tests` to
# run only tests/; the gallery and the notebook in a second call).
#
# The sessions run in the current interpreter (OPGUIDE_SYSTEM_TORCH=1) and
# build the CUDA kernels (USE_CUDA=1; TORCH_CUDA_ARCH_LIST defaults to the
# visible GPU's architecture).
set -euo pipefail
cd "$(dirname "$0")/.."
session="${1:?usage: tools/gpu_suite.sh tests|docs [WHEELHOUSE]}"
wheels="$(cd "${2:-.whl}" && pwd)"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible to torch'"
python3 -m nox --version >/dev/null 2>&1 || python3 -m pip install -q --no-index --find-links "$wheels" nox
export OPGUIDE_SYSTEM_TORCH=1 OPGUIDE_WHEELHOUSE="$wheels" USE_CUDA=1
shift $(( $# < 2 ? $# : 2 ))
python3 -m nox -s "$session" -- "$@"
