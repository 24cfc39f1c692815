#!/usr/bin/env bash
# Runs one part of the GPU suite (tools/gpu_suite.sh part N) on a GPU machine
# and records what it printed:
#
#   tools/record_gpu_suite.sh 1|2|3 [WHEELHOUSE [PYTEST ARGS...]]
#
#   part 1 (tests/)                  -> docs/recorded/gpu_suite_<gpu>_tests.log
#   part 2 (the gallery but step 16,
#           and the notebook)        -> docs/recorded/gpu_suite_<gpu>_gallery_notebooks.log
#   part 3 (step 16)                 -> docs/recorded/across_pytorch_gpu.json, which
#                                       step 16 writes itself (OPGUIDE_RECORD_GPU=1)
#
# A log's first line is the command, its second the GPU, torch and the date,
# its third how its paths were shortened; below them, the part's output as it
# came, less pytest-benchmark's warnings. The whole output stays in
# build/gpu_suite_part<N>.log. The record is stamped with the hash of the
# sources it ran (python -m guidekit.recorded.stamp). The script ends with the line
# numbers of the log's header and summary, which docs/building.md shows.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: tools/record_gpu_suite.sh 1|2|3 [WHEELHOUSE [PYTEST ARGS...]]"
part="${1:?$usage}"
wheels="${2:-.whl}"
extra=("${@:3}")
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible to torch'"
gpu="$(python3 -c 'import torch; from guidekit.recorded import short_gpu_name as s; print(s(torch.cuda.get_device_name()))')"
case "$part" in
  1) record="docs/recorded/gpu_suite_${gpu}_tests.log" ;;
  2) record="docs/recorded/gpu_suite_${gpu}_gallery_notebooks.log" ;;
  3) record="" ; export OPGUIDE_RECORD_GPU=1 ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
log="build/gpu_suite_part$part.log"
mkdir -p build
venv="$(python3 -c 'import sys; print(sys.prefix)')"

status=0
tools/gpu_suite.sh part "$part" "$wheels" "${extra[@]}" 2>&1 | tee "$log" || status=$?
if [[ -z "$record" ]]; then
  if [[ $status -eq 0 ]]; then
    echo "refreshed: across_pytorch_gpu.json (written and stamped by step 16)"
  else
    echo "record_gpu_suite: part 3 failed (status $status): nothing refreshed"
  fi
  exit "$status"
fi
{
  echo "# tools/gpu_suite.sh part $part $wheels${extra[*]:+ ${extra[*]}}"
  python3 -c 'import datetime, torch
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__},",
      datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))'
  echo "# paths: <checkout> is the clone, <venv> the machine's Python environment"
  grep -v -e PytestBenchmarkWarning -e 'warner(' "$log" | sed -e "s|$PWD|<checkout>|g" -e "s|$venv|<venv>|g"
} > "$record"
python3 -m guidekit.recorded.stamp "$record"
echo "refreshed: $(basename "$record") (part $part ended with status $status)"
summary="$(grep -n -E '\b[0-9]+ (passed|failed)\b.* in [0-9.]+s' "$record" | tail -1 | cut -d: -f1)"
echo "docs/building.md shows its lines 1-2,${summary:-?} (the header and pytest's summary)"
exit "$status"
