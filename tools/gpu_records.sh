#!/usr/bin/env bash
# Remakes the records of docs/recorded/ on a GPU machine, in parts that each
# fit in one ten-minute call (see tools/gpu_suite.sh):
#
#   tools/gpu_records.sh list                # which part makes which record, and how
#   tools/gpu_records.sh PART [WHEELHOUSE]   # PART 1 to 6
#   tools/gpu_records.sh PART WHEELHOUSE NAME  # only the records of PART that NAME, a
#                                            # name or a pattern, matches (sweep_h200.json,
#                                            # "cuda_forward_hints_*"), when a part is too
#                                            # long for one call ("" for no wheelhouse)
#   tools/gpu_records.sh stale [WHEELHOUSE [NAME]]  # every part, making only the records
#                                            # whose kind has a stale record (or none yet)
#   tools/gpu_records.sh list stale          # which those are, and the stale records that
#                                            # no part makes
#
# A record made is stamped, and so no longer stale: run `stale` again after a
# call's time limit stopped it, and it goes on with the records still stale (a
# sweep with its processes still to run).
#
# Each part builds opguide's CUDA kernels in place (once: later parts reuse the
# build), runs its commands, writes each record into docs/recorded/, stamps it
# with the hash of the sources it measured and prints "refreshed: NAME".
# Part 6 runs each operator's own benchmark (guidekit/benchmark/OPERATOR.py).
# Part 5 measures variants of the kernels: each a patch in tools/variants/ or
# a define for nvcc, applied to a copy of the sources under build/ (the work
# tree is left as it is), built and timed next to the library as it is; the
# record stores a patch's hash with the sources'. A record that is not in any part measured
# something no command makes from the sources (two GPUs, another torch);
# `list` names those and the page that shows each prints, beside it, which of
# its sources changed since.
set -euo pipefail
cd "$(dirname "$0")/.."
part="${1:?usage: tools/gpu_records.sh list [stale]|stale|1|2|3|4|5|6 [WHEELHOUSE [NAME]]}"
out=docs/recorded
only="${3:-}"
# want NAME [HOW...]: is NAME made in this run? (NAME matches the pattern given, e.g.
# "triton_evict_*"). `list` runs every part with listing=1: want then prints NAME (the
# records of that name, for a NAME with <gpu> in it) and HOW, the command's
# arguments, and nothing is made.
listing=""
want() {
  is_stale "$1" || return 1
  if [[ -n "$listing" ]]; then
    local found=() f
    mapfile -t found < <(of_kind "$1")
    for f in "${found[@]:-$1}"; do echo "  $f ${*:2}" | sed "s|$scratch/||g"; done
    return 1
  fi
  # shellcheck disable=SC2053  # $only is a pattern on purpose
  [[ -z "$only" || "$1" == $only ]]
}
# With `stale`: the stale records' names (python3 -m guidekit.recorded.stamp --check).
stale_only="" stale_names=""
if [[ "$part" == stale || ("$part" == list && "${2:-}" == stale) ]]; then
  stale_only=1
  stale_names="$(python3 -m guidekit.recorded.stamp --check | sed -n 's/^\([^ :]*\): .*/\1/p' || true)"
fi
is_stale() {  # is_stale NAME: whether a run makes NAME (always, but under `stale`)
  [[ -z "$stale_only" ]] && return 0
  local found=() f
  mapfile -t found < <(of_kind "$1")
  ((${#found[@]} == 0)) && return 0
  for f in "${found[@]}"; do grep -qxF "$f" <<< "$stale_names" && return 0; done
  return 1
}
# Under build/, not /tmp: the programs compiled here run from it, and /tmp may
# be mounted noexec.
mkdir -p build
scratch="$(mktemp -d "$PWD/build/records.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

# The sweep of every pass and dtype, one process each, merged (tools/merge_sweeps.py).
# Each process's result is kept in build/records_partial/NAME-HASH/ (HASH: of the
# sources the record measures) until the merge: a run stopped midway, by a call's
# time limit, resumes at the first process it had not finished, on the same sources
# (on a fresh machine, when that folder is carried there).
sweep() {  # sweep NAME [BENCHMARK ARGS...]
  want "$1" "(--sweep, each dtype and pass in a process, merged)" "${@:2}" || return 0
  local name="$1" keep f; shift
  keep="build/records_partial/${name%.*}-$(python3 -c 'import sys
from guidekit.recorded.sources import current
print(current(sys.argv[1])["sha256"][:16])' "$name")"
  mkdir -p "$keep"
  for d in bf16 fp16; do for p in backward forward fused training; do
    f="$keep/${name%.*}_${d}_$p.json"
    if [[ -e "$f" ]]; then echo "kept: $f"; continue; fi
    python3 -m guidekit.benchmark --sweep --dtypes "$d" --passes "$p" "$@" --out "$f.part"
    mv "$f.part" "$f"
  done; done
  python3 tools/merge_sweeps.py "$keep/${name%.*}"_*_*.json --out "$out/$name"
  rm -rf "$keep"
  done_ "$name"
}
bench() {  # bench NAME [BENCHMARK ARGS...]
  want "$@" || return 0
  local name="$1"; shift
  python3 -m guidekit.benchmark "$@" --out "$out/$name"
  done_ "$name"
}
tool() {  # tool NAME SCRIPT [OUT]: a record tool, writing NAME (or into the folder OUT)
  want "$1" "$2" || return 0
  python3 "$2" --out "${3:-$out/$1}"
  done_ "$1"
}
# Where and when, the first line of a text record.
header() {
  python3 -c 'import datetime, torch, triton
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__},",
      datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))'
}
# Commands' printed output as a text record, each under a line with its command.
run_to() {  # run_to FILE COMMAND...
  local file="$1"; shift
  { echo "# $*" | sed "s|$scratch/||"; "$@" 2>&1; echo; } >> "$file"
}
text() {  # text NAME COMMAND...
  want "$@" || return 0
  local name="$1"; shift
  header > "$scratch/$name"
  run_to "$scratch/$name" "$@"
  mv "$scratch/$name" "$out/$name"
  done_ "$name"
}
# A torch-free sweep program, compiled for the H100/H200 (sm_90).
sweep_binary() {  # sweep_binary OUT SOURCE [NVCC FLAGS...]
  local binary="$1" source="$2"; shift 2
  nvcc -O3 -std=c++17 -arch=sm_90 "$@" "$source" -o "$binary"
}
nvcc_sweep() {  # nvcc_sweep NAME SOURCE [ARGS...]
  want "$@" || return 0
  local name="$1" source="$2"; shift 2
  sweep_binary "$scratch/sweep" "$source" -Icsrc
  text "$name" "$scratch/sweep" "$@"
}
# A copy of the sources in $scratch changed by VARIANT: tools/variants/VARIANT.patch
# applied, or, for a VARIANT that starts with -D, that define given to nvcc
# (NVCC_APPEND_FLAGS). Its C++ and CUDA extension is built when the variant
# changes csrc/, else it takes the library's. Prints the copy's path.
variant() {  # variant VARIANT
  local dir="$scratch/variant_${1//[^A-Za-z0-9_]/_}" flags="" patch="tools/variants/$1.patch"
  mkdir -p "$dir"
  tar -cf - --exclude=__pycache__ --exclude='*.so' csrc opguide guidekit tools setup.py \
    pyproject.toml | tar -xf - -C "$dir"
  if [[ "$1" == -D* ]]; then
    flags="$1"
  else
    # GIT_CEILING_DIRECTORIES: git applies the patch to this folder, never to the
    # repository around it.
    (cd "$dir" && GIT_CEILING_DIRECTORIES="$scratch" git apply "$OLDPWD/$patch") >&2
  fi
  if [[ -n "$flags" ]] || grep -q '^+++ b/csrc/' "$patch"; then
    (cd "$dir" && NVCC_APPEND_FLAGS="$flags" USE_CUDA=1 python3 setup.py -q build_ext \
      --inplace >"$dir.build.log" 2>&1) || { tail -30 "$dir.build.log" >&2; return 1; }
  else
    cp opguide/_C*.so "$dir/opguide/"
  fi
  echo "$dir"
}
vbench() {  # vbench NAME VARIANT [BENCHMARK ARGS...]: bench, built as VARIANT (see variant)
  want "$@" || return 0
  local name="$1" dir
  dir="$(variant "$2")"
  shift 2
  (cd "$dir" && PYTHONPATH="$dir" python3 -m guidekit.benchmark "$@" --out "$OLDPWD/$out/$name")
  done_ "$name"
}
# The registry's operators that have a benchmark of their own (guidekit/benchmark/NAME.py).
operator_benchmarks() {
  python3 -c 'from guidekit.recorded.sources import operator_benchmarks as o; print(*o())'
}
# of_kind NAME: the records in $out of NAME's kind, whichever GPU made each: NAME
# with its GPU's part ($gpu) matched as guidekit.recorded.GPU_PART, as pages
# find it (guidekit.recorded.resolve); NAME itself if it has no GPU's part.
of_kind() {
  local stem="${1%%_"$gpu".*}" ext="${1##*_"$gpu".}" f
  if [[ "$1" != *"_$gpu."* ]]; then
    [[ -e "$out/$1" ]] && echo "$1"
    return 0
  fi
  for f in "$out/$stem"_*."$ext"; do
    [[ "${f##*/}" =~ ^${stem}_${gpu_part}\.${ext}$ ]] && echo "${f##*/}"
  done
  return 0
}
# Stamps the record NAME, and removes that record made on another GPU.
done_() {
  python3 -m guidekit.recorded.stamp "$out/$1" && echo "refreshed: $1"
  local other
  for other in $(of_kind "$1"); do
    [[ "$other" == "$1" ]] || { rm -f "$out/$other" "$out/$other.sources" && echo "replaced: $other"; }
  done
}
gpu="$(python3 -c 'import torch; from guidekit.recorded import short_gpu_name as s; print(s(torch.cuda.get_device_name()))' 2>/dev/null || echo gpu)"
gpu_part="$(python3 -c 'from guidekit.recorded import GPU_PART; print(GPU_PART)')"
# The odd row lengths of part 2's sweep, which part 5's variant of them is timed at too.
odd_rows=(--sweep-ns 2049,2050,2052,4096,4104,5125,8200,12300 --passes forward,backward,training,fused
  --impls "opguide,opguide triton,F.rms_norm,copy (same bytes)")

run_part() {  # run_part PART
  case "$1" in
    1)
      sweep "sweep_$gpu.json"
      sweep "sweep_opguide_$gpu.json" --impls "opguide,opguide triton,copy (same bytes)"
      bench "sweep_one_input_set_$gpu.json" --sweep --dtypes bf16 --passes forward --min-sets 1 ;;
    2)
      for d in bf16 fp16; do bench "eager_${d}_$gpu.json" --eager --dtypes "$d"; done
      bench "sweep_odd_rows_$gpu.json" --sweep --dtypes bf16,fp16 "${odd_rows[@]}"
      shapes=(--passes forward,fused --shapes 8192x4096,4096x8192,65536x1024 --dtypes bf16)
      bench "l2_keep_$gpu.json" "${shapes[@]}" --keep-l2
      bench "l2_clean_$gpu.json" "${shapes[@]}"
      for on in 0 1; do
        name=pdl_off.json; [[ $on == 1 ]] && name=pdl_on.json
        OPGUIDE_PDL=$on bench "$name" --passes forward,backward --impls "opguide,compile(reference)"
      done ;;
    3)
      nvcc_sweep "sweep_rms_norm_forward_cluster_$gpu.txt" tools/sweep_rms_norm_forward_cluster.cu
      nvcc_sweep "sweep_rms_norm_backward_cluster_$gpu.txt" tools/sweep_rms_norm_backward_cluster.cu
      nvcc_sweep "sweep_rms_norm_backward_pipelined_$gpu.txt" tools/sweep_rms_norm_backward.cu pipelined
      text "sweep_triton_split_$gpu.txt" python3 tools/sweep_triton.py split
      text "sweep_triton_split_fenced_$gpu.txt" python3 tools/sweep_triton.py split-fenced
      nvcc_sweep "sweep_fused_add_rms_norm_$gpu.txt" tools/sweep_fused_add_rms_norm.cu
      if want "sweep_rms_norm_forward_keep_packed_$gpu.txt" tools/sweep_rms_norm_forward_vectors.cu \
        "(-DOPGUIDE_KEEP_PACKED=1, then 0)"; then
        name="sweep_rms_norm_forward_keep_packed_$gpu.txt"
        header > "$scratch/$name"
        for keep in 1 0; do
          sweep_binary "$scratch/sweep_vectors" tools/sweep_rms_norm_forward_vectors.cu -Icsrc \
            -DOPGUIDE_KEEP_PACKED=$keep
          run_to "$scratch/$name" "$scratch/sweep_vectors"
        done
        mv "$scratch/$name" "$out/$name" && done_ "$name"
      fi
      tool "minimal_cuda_$gpu.json" tools/record_minimal_cuda.py
      tool gpu_debug.json tools/record_gpu_debug.py "$out"
      tool "bad_index_$gpu.json" tools/record_bad_index.py ;;
    4)
      if want "sanitizer_$gpu.txt" "compute-sanitizer memcheck and racecheck of" \
        "tools/sanitize_kernels.py --long-rows --small, then --narrow"; then
        header > "$scratch/sanitizer_$gpu.txt"
        for args in "--long-rows --small" "--narrow"; do for tool in memcheck racecheck; do
          # shellcheck disable=SC2086  # the arguments split on purpose
          run_to "$scratch/sanitizer_$gpu.txt" compute-sanitizer --tool $tool \
            python3 tools/sanitize_kernels.py $args
        done; done
        mv "$scratch/sanitizer_$gpu.txt" "$out/" && done_ "sanitizer_$gpu.txt"
      fi
      text "cuda_tests_$gpu.log" python3 -m pytest -q -p no:cacheprovider tests/test_rms_norm_cuda.py \
        tests/test_fused_add_rms_norm.py tests/test_rms_norm.py -k cuda ;;
    5)
      fixed=(--dtypes bf16 --impls "opguide,copy (same bytes)")
      # Each variant is timed next to what it is compared with: the forward with the
      # hints the backward's stores have, then no hints in any kernel; each of the
      # others, then the library as it is.
      vbench "cuda_forward_hints_on_$gpu.json" cuda_forward_hints_on --passes forward,backward \
        "${fixed[@]}"
      vbench "cuda_forward_hints_off_$gpu.json" -DOPGUIDE_STREAMING_HINTS=0 \
        --passes forward,backward "${fixed[@]}"
      vbench "cuda_forward_loads_interleaved_$gpu.json" cuda_forward_loads_interleaved \
        --passes forward "${fixed[@]}"
      bench "cuda_forward_loads_first_$gpu.json" --passes forward "${fixed[@]}"
      triton=(--passes forward,fused --dtypes bf16 --impls "opguide triton,copy (same bytes)")
      vbench "triton_evict_first_on_$gpu.json" triton_evict_first_on "${triton[@]}"
      bench "triton_evict_first_off_$gpu.json" "${triton[@]}"
      vbench "sweep_odd_rows_16_byte_only_$gpu.json" odd_rows_16_byte_only --sweep --dtypes bf16 \
        "${odd_rows[@]}" ;;
    6)
      for op in $(operator_benchmarks); do
        want "${op}_$gpu.json" python3 -m guidekit.benchmark."$op" || continue
        python3 -m guidekit.benchmark."$op" --out "$out/${op}_$gpu.json"
        done_ "${op}_$gpu.json"
      done
      # Every operator beside a kernel that holds all but two SMs, with the
      # setting of each route for a shared GPU (step 10.5).
      for route in triton:OPGUIDE_TRITON_SPLIT cuda:OPGUIDE_CLUSTERS; do
        name="shared_gpu_${route%%:*}_$gpu.json" backend="${route%%:*}"
        [[ "$backend" == cuda ]] && backend=cpp
        want "$name" "${route#*:}=0" python3 tests/shared_gpu_probe.py --routes "$backend" || continue
        env "${route#*:}=0" python3 tests/shared_gpu_probe.py --routes "$backend" --json "$out/$name"
        done_ "$name"
      done ;;
  esac
}

if [[ "$part" == list ]]; then
  listing=1 gpu="<gpu>"
  made="$(for p in 1 2 3 4 5 6; do echo "part $p:"; run_part "$p"; done)"
  echo "$made"
  if [[ -n "$stale_only" ]]; then
    echo "stale, and in no part (\`tools/gpu_records.sh list\` says how each is made):"
    for f in $stale_names; do grep -q "^  $f " <<< "$made" || echo "  $f"; done
    exit 0
  fi
  cat <<LIST
by hand (no part):
  two GPUs: two_gpus.json (tools/record_two_gpus.py), many_gpus_nccl.json (step 17)
  another torch: stable_abi_torch2.11_cuda.json, stable_abi_torch2.15_cpu.json
    (tools/record_stable_abi.py)
  the template's projects: template_stable_cuda_h200.json, template_classic_cuda_h200.json,
    template_triton_cuda_h200.json, template_python_cuda_h200.json,
    template_tritonaot_cuda_h200.json (tools/record_template_gpu.py build here, with
    --triton-aot for the last; run there: run --memcheck scatter --jobs 7)
  the template's Triton operators compiled ahead of time, timed:
    template_tritonaot_bench_h200.json (tools/bench_template_aot.py DIR --render here;
    there: tools/bench_template_aot.py DIR --rounds 21 --cold 3 --out FILE)
  the suite's own logs: gpu_suite_h200_tests.log, gpu_suite_h200_gallery_notebooks.log
    (tools/record_gpu_suite.sh 1, tools/record_gpu_suite.sh 2 .whl --durations=10)
  longer than one part: model_step_h200.json (tools/record_model_step.py)
  the Triton kernels compiled ahead of time, in a GPU build: triton_aot_h200.json
    (tools/bench_per_call.py --rounds 21 --shapes 1x4096,8192x4096,4096x8192,65536x1024 --out FILE)
  elsewhere: hipcc_check.json (step 4, where hipcc is), across_pytorch_gpu.json
    (step 16 on a GPU: tools/record_gpu_suite.sh 3)
LIST
  exit 0
fi
[[ "$part" == [1-6] || "$part" == stale ]] ||
  { echo "unknown part: $part (list, stale, 1, 2, 3, 4, 5 or 6)" >&2; exit 2; }
wheels="$(cd "${2:-.whl}" 2>/dev/null && pwd || true)"
[[ -n "${2+x}" && -z "$2" ]] && wheels=""
[[ -z "$wheels" ]] || python3 -m pip install -q --no-index --find-links "$wheels" setuptools wheel ninja
# The CUDA kernels, compiled in place for the visible GPU (reused when nothing changed).
USE_CUDA=1 python3 setup.py -q build_ext --inplace
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if [[ "$part" == stale ]]; then
  for p in 1 2 3 4 5 6; do run_part "$p"; done
else
  run_part "$part"
fi
echo "part $part done; python3 -m guidekit.recorded.stamp --check lists the records still stale"
