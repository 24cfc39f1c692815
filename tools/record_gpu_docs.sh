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
# A stopped build also packs what the next one needs into
# build/gpu_docs_state.tar.gz: the gallery's pages, build/gpu_docs_stopped.txt,
# build/gpu_docs.log and the files of the build tree that those pages show
# (step 18's project, for one). To go on on another machine with the same GPU,
# torch, Triton and wheelhouse path, unpack it in the checkout (`tar xzf
# build/gpu_docs_state.tar.gz`) and run the same command. A step whose page
# shows a file that is not there runs again.
#
# The record's first line is the command, its second the GPU, torch, Triton
# and the date, its third how its paths were shortened, then one line for
# each earlier build the limit stopped; below them, the build's own lines:
# sphinx-gallery's time for each step (its own, or the time it stored when an
# earlier build ran the step), how many steps an earlier build had run, the
# notebook's time, and the build's last lines. The whole output of every
# build stays in build/gpu_docs.log. The record is stamped with the hash of the sources the
# build ran (tools/stamp_records.py); the site is in docs/_build/html.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels="${1:-.whl}"
limit="${OPGUIDE_DOCS_LIMIT:-540}"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible to torch'"
gpu="$(python3 -c 'import torch; from guidekit.recorded import short_gpu_name as s; print(s(torch.cuda.get_device_name()))')"
record="docs/recorded/gpu_docs_$gpu.log"
log=build/gpu_docs.log
# The first line: what the builds must share (the sources' hash, the GPU,
# torch, Triton, the wheelhouse); then one line for each earlier build that
# the limit stopped.
stopped=build/gpu_docs_stopped.txt
mkdir -p build
venv="$(python3 -c 'import sys; print(sys.prefix)')"
identity() {
  python3 -c 'import sys, torch, triton
from guidekit.recorded import sources
print(sources.current(sys.argv[1])["sha256"], torch.cuda.get_device_name(), torch.__version__,
      triton.__version__, sys.argv[2])' "$(basename "$record")" "$(cd "$wheels" && pwd)"
}
# The gallery's steps (conf.py's filename_pattern) whose page a build wrote:
# the hash of the script (sphinx-gallery writes it after the run) and the page.
steps_run() {
  local n=0 name
  for script in examples_src/[0-9][0-9]_*.py; do
    name="docs/auto_examples/$(basename "$script" .py)"
    [ -e "$name.py.md5" ] && [ -e "$name.rst" ] && n=$((n + 1))
  done
  echo "$n"
}
# The files of the checkout that a gallery page shows (`.. literalinclude::
# /../PATH`), one PATH a line; PAGES are .rst files.
shown_files() {
  { grep -ho '^ *\.\. \(literalinclude\|include\):: */\.\./[^ ]*' "$@" 2>/dev/null || true; } |
    sed -e 's|.*:: */\.\./||' | sort -u
}

if [ -s "$stopped" ]; then
  if [ "$(head -1 "$stopped")" != "$(identity)" ]; then
    echo "record_gpu_docs: the sources, GPU, torch, Triton or wheelhouse changed since an" >&2
    echo "earlier build stopped; to start again: rm -rf docs/auto_examples $stopped" >&2
    exit 2
  fi
  # Pages written since the stop came from another build: not this record's.
  if [ -n "$(find docs/auto_examples -name '*.md5' -newer "$stopped" 2>/dev/null | head -1)" ]; then
    echo "record_gpu_docs: another build wrote gallery pages since the last stop; to start" >&2
    echo "again: rm -rf docs/auto_examples $stopped" >&2
    exit 2
  fi
  # A step stopped between its hash and its page runs again; so does a step
  # whose page shows a file that its run wrote and that is not here (a build
  # stopped on another machine, unpacked without it).
  for md5 in docs/auto_examples/*.py.md5; do
    [ -e "$md5" ] || continue
    page="${md5%.py.md5}.rst"
    if [ ! -e "$page" ]; then
      rm -f "$md5"
      continue
    fi
    missing="$(shown_files "$page" | while read -r path; do [ -e "$path" ] || echo "$path"; done)"
    missing="${missing%%$'\n'*}"
    if [ -n "$missing" ]; then
      rm -f "$md5"
      echo "record_gpu_docs: $(basename "${md5%.py.md5}") runs again: its page shows $missing, which is not here"
    fi
  done
  echo "record_gpu_docs: going on from $(($(wc -l <"$stopped") - 1)) stopped build(s), $(steps_run) gallery steps run"
  echo "--- the next build ---" >>"$log"
else
  # A first build runs every step: pages that an older build left are removed.
  rm -rf docs/auto_examples build/gpu_docs_state.tar.gz
  identity >"$stopped"
  : >"$log"
fi

# docs/conf.py: run only the gallery steps that have no page yet.
export OPGUIDE_DOCS_GO_ON=1
status=0
start=$SECONDS
# timeout signals the build's whole process group: nox, Sphinx and the gallery's workers.
timeout --kill-after=20 "$limit" tools/gpu_suite.sh docs "$wheels" 2>&1 | tee -a "$log" || status=$?
took=$((SECONDS - start))
total="$(find examples_src -maxdepth 1 -name '[0-9][0-9]_*.py' | wc -l)"
# 124: the limit; 137: killed after it (a kill before it, such as the OOM
# killer's, is a failure).
if [ "$status" -eq 124 ] || { [ "$status" -eq 137 ] && [ "$took" -ge "$limit" ]; }; then
  echo "an earlier build, stopped at ${limit} s (OPGUIDE_DOCS_LIMIT); $(steps_run) of $total gallery steps had run by then" >>"$stopped"
  touch "$stopped"
  # What a build on another machine needs to go on (see above); modification
  # times are kept, so that the check against pages written since holds there.
  state=build/gpu_docs_state.tar.gz
  shown_files docs/auto_examples/*.rst | { grep '^build/' || true; } | while read -r path; do
    if [ -e "$path" ]; then echo "$path"; fi
  done | tar czf "$state" docs/auto_examples "$stopped" "$log" -T -
  echo "record_gpu_docs: the build stopped at ${limit} s with $(steps_run) of $total gallery steps run;"
  echo "record_gpu_docs: run the same command again on this machine to finish it ($record is unchanged),"
  echo "record_gpu_docs: or on another like it after unpacking $state ($(du -h "$state" | cut -f1)) in the checkout"
  exit 3
fi
# A warning of a stopped build fails the record as the build's own -W would.
# Sphinx's own lines only (from its command on): pip warns in the same words.
sphinx_warnings() {
  awk '/^--- the next build ---$/ { on = 0 } /nox > .*-m sphinx / { on = 1 }
       on && /(^|: )(WARNING|ERROR):/ { n++ } END { print n + 0 }'
}
earlier="$(tac "$log" | sed -n '/^--- the next build ---$/,$p' | tac | sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' | sphinx_warnings)"
if [ "$(wc -l <"$stopped")" -gt 1 ] && [ "$earlier" -gt 0 ] && [ "$status" -eq 0 ]; then
  echo "record_gpu_docs: a stopped build printed $earlier warning(s) or error(s) (in $log)"
  status=1
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
    /^--- the next build ---$/ { sphinx = 0 }
    /nox > .*-m sphinx / { sphinx = 1 }
    /^computation time summary:/ { times = 1; print; next }
    times && /^ *- / { print; next }
    { times = 0 }
    sphinx && /(^|: )(WARNING|ERROR):/ { print; next }
    /using torch|generating gallery \(|Executed notebook|Sphinx-Gallery successfully|after excluding|build succeeded|build finished|Exception occurred|Extension error|Session docs|record_gpu_docs:/ { print }
  ' | sed -e "s|$PWD|<checkout>|g" -e "s|$venv|<venv>|g"
} > "$record"
python3 tools/stamp_records.py "$record"
echo "refreshed: $(basename "$record")"
summary="$(grep -n '^record_gpu_docs: the build took' "$record" | tail -1 | cut -d: -f1)"
first="$(grep -n 'generating gallery (' "$record" | head -1 | cut -d: -f1)"
stops=$(($(wc -l <"$stopped") - 1))
rm -f "$stopped" build/gpu_docs_state.tar.gz
shown="1-2"
[ "$stops" -eq 1 ] && shown="$shown,4"
[ "$stops" -gt 1 ] && shown="$shown,4-$((3 + stops))"
echo "docs/building.md shows its lines $shown,${first:-?}-${summary:-?} (the header, the stopped builds, the run)"
exit "$status"
