#!/usr/bin/env bash
# Runs the test suite (or builds the site) on a GPU machine that has its own
# CUDA build of torch and no network, installing the Python tools from a
# wheelhouse made beforehand by tools/make_wheelhouse.py.
#
#   tools/gpu_suite.sh tests [WHEELHOUSE [PYTEST ARGS...]]   # default wheelhouse: .whl
#   tools/gpu_suite.sh docs  [WHEELHOUSE]
#   tools/gpu_suite.sh records PART [WHEELHOUSE]   # PART 1 to 4; `records list` lists them
#
# Extra arguments go to pytest (e.g. `tools/gpu_suite.sh tests .whl tests` to
# run only tests/; the gallery and the notebook in a second call).
#
# The sessions run in the current interpreter (OPGUIDE_SYSTEM_TORCH=1) and
# build the CUDA kernels (USE_CUDA=1; TORCH_CUDA_ARCH_LIST defaults to the
# visible GPU's architecture).
#
# `records PART` remakes the records in docs/recorded/ that one command makes
# from the sources as they are, in four parts that each fit in ten minutes on
# an H100 (the benchmark's sweeps; its fixed shapes and eager calls; the tools'
# programs; compute-sanitizer and the CUDA tests), stamps each with the hash of the sources it measured
# (tools/stamp_records.py) and prints what it refreshed. Then
# `OPGUIDE_STALE_RECORDS=fail tools/gpu_suite.sh tests .whl tests/test_recorded.py`
# fails on any record left stale.
set -euo pipefail
cd "$(dirname "$0")/.."
session="${1:?usage: tools/gpu_suite.sh tests|docs|records [PART] [WHEELHOUSE]}"
if [[ "$session" == records ]]; then
  exec tools/gpu_records.sh "${@:2}"
fi
wheels="$(cd "${2:-.whl}" && pwd)"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible to torch'"
python3 -m nox --version >/dev/null 2>&1 || python3 -m pip install -q --no-index --find-links "$wheels" nox
export OPGUIDE_SYSTEM_TORCH=1 OPGUIDE_WHEELHOUSE="$wheels" USE_CUDA=1
shift $(( $# < 2 ? $# : 2 ))
python3 -m nox -s "$session" -- "$@"
