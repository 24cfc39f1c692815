#!/usr/bin/env bash
# Builds the site on a GPU machine, every gallery step and the notebook run on
# the GPU (tools/gpu_suite.sh docs), and records what the build printed about
# its run in docs/recorded/gpu_docs_<gpu>.log:
#
#   tools/record_gpu_docs.sh [WHEELHOUSE]     # default .whl, as tools/gpu_suite.sh
#
# The record's first line is the command, its second the GPU, torch, Triton
# and the date, its third how its paths were shortened; below them, the
# build's own lines: sphinx-gallery's time for each step, the notebook's, and
# the build's last lines. The whole output stays in build/gpu_docs.log. The
# record is stamped with the hash of the sources the build ran
# (tools/stamp_records.py); the site is in docs/_build/html.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels="${1:-.whl}"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible to torch'"
gpu="$(python3 -c 'import torch; from guidekit.recorded import short_gpu_name as s; print(s(torch.cuda.get_device_name()))')"
record="docs/recorded/gpu_docs_$gpu.log"
log=build/gpu_docs.log
mkdir -p build
venv="$(python3 -c 'import sys; print(sys.prefix)')"

status=0
start=$SECONDS
tools/gpu_suite.sh docs "$wheels" 2>&1 | tee "$log" || status=$?
echo "record_gpu_docs: the build took $((SECONDS - start)) s and ended with status $status" | tee -a "$log"

{
  echo "# tools/record_gpu_docs.sh $wheels  (tools/gpu_suite.sh docs $wheels)"
  python3 -c 'import datetime, torch, triton
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__},",
      datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))'
  echo "# paths: <checkout> is the clone, <venv> the machine's Python environment"
  # Colours and progress lines out; then the lines about the run: the
  # gallery's jobs and times, the notebook, warnings and errors, the end.
  sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' "$log" | tr '\r' '\n' | awk '
    /^computation time summary:/ { times = 1; print; next }
    times && /^ *- / { print; next }
    { times = 0 }
    /using torch|generating gallery \(|Executed notebook|Sphinx-Gallery successfully|build succeeded|build finished|(^|: )(WARNING|ERROR):|Exception occurred|Extension error|Session docs|record_gpu_docs:/ { print }
  ' | sed -e "s|$PWD|<checkout>|g" -e "s|$venv|<venv>|g"
} > "$record"
python3 tools/stamp_records.py "$record"
echo "refreshed: $(basename "$record")"
exit "$status"
