#!/usr/bin/env bash
# One run of the bundled programs on a GPU host, for the recorded results in
# docs/benchmarks: the conformance runner on every backend, the fault suite
# on every GPU backend, the benchmark with the PyTorch baseline, the
# training benchmark (parity and throughput), the decode benchmark and the
# first-names example. Every step runs even when an earlier one fails; logs
# and reports go to OUTDIR, a summary is printed last.
#
#   . .device/env.sh && bash scripts/gpu-host-run.sh OUTDIR [BENCH_FILTER]
#
# Needs the programs from `pnpm bundle --outdir .device/app` and the kit from
# shared/device (Node, dawn.node, koffi). BACKENDS (default "wgpu,cuda")
# picks the GPU backends; STEP_TIMEOUT (seconds, default 0 = none) bounds
# each step, so that one hung step cannot take the others' time; PEAK_TFLOPS
# (default 67, an H100 SXM's fp32 datasheet peak) is the FLOP limit of the
# benchmark's FLOP-bound cases; SOAK (default 1000000) is the number of
# kernels of the fault suite's soak and the calls of soak.mjs's leak checks; DECODE_CONFIGS (default
# "llama-d2048-hd64") the decode benchmark's models, DECODE_WEIGHTS where
# their checkpoints are written; NAMES_BACKEND (default cuda) where the names
# example trains; SKIP a space-separated list of step names to leave out
# (e.g. "bench names").
set -u
out=${1:?usage: gpu-host-run.sh OUTDIR [BENCH_FILTER]}
filter=${2:-}
app=${APP:-.device/app}
backends=${BACKENDS:-wgpu,cuda}
step_timeout=${STEP_TIMEOUT:-0}
peak_tflops=${PEAK_TFLOPS:-67}
soak=${SOAK:-1000000}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"

skip=" ${SKIP:-} "
step() { # name, command...
  local name=$1
  shift
  case "$skip" in *" $name "*)
    printf '%-28s skipped\n' "$name" >>"$summary"
    return
    ;;
  esac
  local start=$SECONDS
  timeout "$step_timeout" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - start))" >>"$summary"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1

step conformance-cpu node "$app/conformance.mjs" --backend cpu
for b in ${backends//,/ }; do
  step "conformance-$b" node "$app/conformance.mjs" --backend "$b"
done

if [ -f "$app/faults.mjs" ]; then
  for b in ${backends//,/ }; do
    step "faults-$b" node "$app/faults.mjs" --backend "$b" --soak "$soak"
  done
fi

if [ -f "$app/soak.mjs" ]; then
  # Leak checks: SOAK eager calls and batch replays, 100 model load/dispose cycles.
  for b in ${backends//,/ }; do
    step "soak-$b" node --expose-gc "$app/soak.mjs" --backend "$b" --calls "$soak" --cycles 100
  done
fi

bench_args=(--backend "$backends" --baseline torch --peak-tflops "$peak_tflops" --out "$out/bench")
[ -n "$filter" ] && bench_args+=(--filter "$filter")
step bench node "$app/bench.mjs" "${bench_args[@]}"

if [ -f "$app/train-bench.mjs" ]; then
  step train-bench node "$app/train-bench.mjs" --backends "$backends" --baseline torch --out "$out/train"
fi

if [ -f "$app/decode-bench.mjs" ]; then
  for config in ${DECODE_CONFIGS:-llama-d2048-hd64}; do
    # --profile: the decode step's kernels timed group by group, alone and inside the step.
    step "decode-$config" node "$app/decode-bench.mjs" --config "$config" --backends "$backends" \
      --baseline torch --profile --weights "${DECODE_WEIGHTS:-/tmp/rayo-decode-weights}" --out "$out/decode-$config"
  done
fi

if [ -f "$app/names.mjs" ]; then
  step names node "$app/names.mjs" --backend "${NAMES_BACKEND:-cuda}" --out "$out/names"
fi

cat "$out/gpu.txt"
for f in "$out"/conformance-*.log; do
  echo "$(basename "$f" .log): $(grep -E 'passed, [0-9]+ failed' "$f" | tail -1)"
done
for f in "$out"/faults-*.log; do
  [ -f "$f" ] && echo "$(basename "$f" .log): $(grep -E 'survived, [0-9]+ not survived' "$f" | tail -1)"
done
for f in "$out"/soak-*.log; do
  [ -f "$f" ] && echo "$(basename "$f" .log): $(grep -E '^soak: ' "$f" | tail -1)"
done
cat "$summary"
