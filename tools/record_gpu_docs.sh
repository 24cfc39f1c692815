#!/usr/bin/env bash
# Builds the site on a GPU machine, every gallery step and the notebook run on
# the GPU (tools/gpu_suite.sh docs), and records what the build printed about
# its run in docs/recorded/gpu_docs_<gpu>.log:
#
#   tools/record_gpu_docs.sh [WHEELHOUSE]     # default .whl, as tools/gpu_suite.sh
#
# The build stops after OPGUIDE_DOCS_LIMIT seconds (default 540), so that one
# call fits in a ten-minute command with the install before it. On a machine
# whose compiler caches are cold the build takes longer than that. A stopped
# build keeps every gallery step it finished (sphinx-gallery stores each
# step's page with the hash of its script), says how many, and exits with
# status 3; run the same command again on the same machine and the next build
# runs only the steps left, then the notebook and the rest of the site. Both
# builds must run the same sources: a second build refuses sources that
# changed since the first one stopped. A first build starts from no gallery
# pages, so that every step in the record ran on the sources it is stamped with.
#
# The record's first line is the command, its second the GPU, torch, Triton
# and the date, its third how its paths were shortened, then one line for
# each earlier build the limit stopped; below them, the build's own lines:
# sphinx-gallery's time for each step (its own, or the time it stored when an
# earlier build ran the step), how many steps an earlier build had run, the
# notebook's time, and the build's last lines. The whole output stays in
# build/gpu_docs.log. The record is stamped with the hash of the sources the
# build ran (tools/stamp_records.py); the site is in docs/_build/html.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels="${1:-.whl}"
limit="${OPGUIDE_DOCS_LIMIT:-540}"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible to torch'"
gpu="$(python3 -c 'import torch; from guidekit.recorded import short_gpu_name as s; print(s(torch.cuda.get_device_name()))')"
record="docs/recorded/gpu_docs_$gpu.log"
log=build/gpu_docs.log
# One line for each earlier build that the limit stopped, and the hash of the
# sources that build ran.
stopped=build/gpu_docs_stopped.txt
mkdir -p build
venv="$(python3 -c 'import sys; print(sys.prefix)')"
sources_hash() {
  python3 -c 'import sys; from guidekit.recorded import sources; print(sources.current(sys.argv[1])["sha256"])' "$(basename "$record")"
}
# The gallery's steps (conf.py's filename_pattern) that a build has run.
steps_run() {
  local n=0 script
  for script in examples_src/[0-9][0-9]_*.py; do
    [ -e "docs/auto_examples/$(basename "$script").md5" ] && n=$((n + 1))
  done
  echo "$n"
}

if [ -s "$stopped" ]; then
  if [ "$(head -1 "$stopped")" != "$(sources_hash)" ]; then
    echo "record_gpu_docs: the sources changed since an earlier build stopped; to start again:" >&2
    echo "  rm -rf docs/auto_examples $stopped" >&2
    exit 2
  fi
  echo "record_gpu_docs: going on from $(($(wc -l <"$stopped") - 1)) stopped build(s), $(steps_run) gallery steps run"
else
  # A first build runs every step: pages that an older build left are removed.
  rm -rf docs/auto_examples
  sources_hash >"$stopped"
fi

# docs/conf.py: run only the gallery steps that have no page yet.
export OPGUIDE_DOCS_GO_ON=1
status=0
start=$SECONDS
# timeout signals the build's whole process group: nox, Sphinx and the gallery's workers.
timeout --kill-after=20 "$limit" tools/gpu_suite.sh docs "$wheels" 2>&1 | tee "$log" || status=$?
took=$((SECONDS - start))
total="$(find examples_src -maxdepth 1 -name '[0-9][0-9]_*.py' | wc -l)"
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  line="an earlier build, stopped at ${limit} s (OPGUIDE_DOCS_LIMIT), had run $(steps_run) of $total gallery steps"
  echo "$line" >>"$stopped"
  echo "record_gpu_docs: the build stopped at ${limit} s with $(steps_run) of $total gallery steps run;"
  echo "record_gpu_docs: run the same command again on this machine to finish it ($record is unchanged)"
  exit 3
fi
echo "record_gpu_docs: the build took $took s and ended with status $status" | tee -a "$log"

{
  echo "# tools/record_gpu_docs.sh $wheels  (tools/gpu_suite.sh docs $wheels)"
  python3 -c 'import datetime, torch, triton
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__},",
      datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))'
  echo "# paths: <checkout> is the clone, <venv> the machine's Python environment"
  tail -n +2 "$stopped" | sed -e 's/^/# /'
  # Colours and progress lines out; then the lines about the run: the
  # gallery's jobs and times, the notebook, warnings and errors, the end.
  sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' "$log" | tr '\r' '\n' | awk '
    /^computation time summary:/ { times = 1; print; next }
    times && /^ *- / { print; next }
    { times = 0 }
    /using torch|generating gallery \(|Executed notebook|Sphinx-Gallery successfully|after excluding|build succeeded|build finished|(^|: )(WARNING|ERROR):|Exception occurred|Extension error|Session docs|record_gpu_docs:/ { print }
  ' | sed -e "s|$PWD|<checkout>|g" -e "s|$venv|<venv>|g"
} > "$record"
rm -f "$stopped"
python3 tools/stamp_records.py "$record"
echo "refreshed: $(basename "$record")"
summary="$(grep -n '^record_gpu_docs: the build took' "$record" | tail -1 | cut -d: -f1)"
echo "docs/building.md shows its lines 1-2 and the build's own lines up to ${summary:-?}"
exit "$status"
