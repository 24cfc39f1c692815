#!/usr/bin/env bash
# Runs the test suite (or builds the site) on a GPU machine that has its own
# CUDA build of torch and no network, installing the Python tools from a
# wheelhouse made beforehand by tools/make_wheelhouse.py.
#
#   tools/gpu_suite.sh suite [WHEELHOUSE]                    # the whole suite: parts 1, 2 and 3
#   tools/gpu_suite.sh part 1|2|3 [WHEELHOUSE [PYTEST ARGS]] # one part; each under ten minutes on an H100
#   tools/gpu_suite.sh tests [WHEELHOUSE [PYTEST ARGS...]] # pytest with your own arguments
#   tools/gpu_suite.sh docs  [WHEELHOUSE]                  # build the site, gallery on the GPU
#   tools/gpu_suite.sh records PART [WHEELHOUSE]           # PART 1 to 6; `records list` lists them
#
# Part 1 is tests/, part 2 Part I (its pages and first_operator/'s tests), the
# gallery scripts and the notebook but step 16,
# part 3 step 16 alone: on a GPU its AOTInductor packages, compiled models and
# CUDA graphs take minutes of compiling, and on a fresh H100 machine a part 2
# that held it ran past ten minutes. Each part runs OPGUIDE_JOBS (default 8) pytest
# processes, whole files each, and ends with the failed items by name.
# OPGUIDE_RECORD_GPU=1 makes part 3 re-make step 16's record
# (docs/recorded/across_pytorch_gpu.json). Part 1 leaves out the tests that make virtual
# environments from a package index (template, wheels): with no network they
# cannot run here, and every CPU run of the README's test command runs them.
# The manifests' projects are built there over the machine's own torch
# (tests/test_manifests.py), the C++ routes with CUDA.
#
# `records PART` runs tools/gpu_records.sh PART (its header says what each
# part remakes); `OPGUIDE_STALE_RECORDS=fail tools/gpu_suite.sh tests .whl
# tests/test_recorded.py` then fails on any record left stale.
#
# The sessions run in the current interpreter (OPGUIDE_SYSTEM_TORCH=1) and
# build the CUDA kernels (USE_CUDA=1; TORCH_CUDA_ARCH_LIST defaults to the
# visible GPU's architecture). A second part on the same machine reuses the
# build.
set -euo pipefail
cd "$(dirname "$0")/.."
session="${1:?usage: tools/gpu_suite.sh suite|part N|tests|docs|records PART [WHEELHOUSE]}"
if [[ "$session" == records ]]; then
  exec tools/gpu_records.sh "${@:2}"
fi
shift
part=""
if [ "$session" = part ]; then
  part="${1:?usage: tools/gpu_suite.sh part 1|2|3 [WHEELHOUSE]}"
  shift
fi
wheels="$(cd "${1:-.whl}" && pwd)"
[ $# -gt 0 ] && shift
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible to torch'"
python3 -m nox --version >/dev/null 2>&1 || python3 -m pip install -q --no-index --find-links "$wheels" nox
export OPGUIDE_SYSTEM_TORCH=1 OPGUIDE_WHEELHOUSE="$wheels" USE_CUDA=1
export OPGUIDE_JOBS="${OPGUIDE_JOBS:-8}"

# The tests that need a package index, left out of part 1 (see above).
ACROSS=examples_src/16_across_pytorch.py  # part 3 (see above)
NEEDS_INDEX=(tests/test_template*.py tests/test_wheels.py)

run_part() {
  local args=(-rf "${@:2}")
  case "$1" in
    1)
      args+=(tests)
      for pattern in "${NEEDS_INDEX[@]}"; do
        for file in $pattern; do
          [ -e "$file" ] && args+=("--ignore=$file") && echo "gpu_suite: part 1 leaves out $file (needs a package index)"
        done
      done
      ;;
    # -v: a line per finished script, so a part cut short says which did not finish.
    2) args+=(-v part1_src first_operator/tests examples_src tutorials "--ignore=$ACROSS") ;;
    3) args+=(-v "$ACROSS") ;;
    *) echo "gpu_suite: no part $1 (parts: 1 tests/, 2 gallery and notebook, 3 step 16)" >&2; return 2 ;;
  esac
  echo "gpu_suite: part $1: pytest ${args[*]}"
  local start=$SECONDS status=0
  python3 -m nox -s tests -- "${args[@]}" || status=$?
  echo "gpu_suite: part $1 finished in $((SECONDS - start)) s with status $status"
  return $status
}

case "$session" in
  suite)
    status=0
    run_part 1 || status=$?
    run_part 2 || status=$?
    run_part 3 || status=$?
    exit $status
    ;;
  part) run_part "$part" "$@" ;;
  tests | docs) python3 -m nox -s "$session" -- "$@" ;;
  *) echo "gpu_suite: unknown session $session" >&2; exit 2 ;;
esac
