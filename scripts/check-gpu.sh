#!/usr/bin/env bash
# check-gpu.sh: the one command a reviewer runs on a GPU machine. Each step has a time limit
# (the whole stays under 10 minutes on an H100) and never hangs:
#   1. build if needed (make; on a bare machine pass --build DIR with binaries built elsewhere)
#   2. the GPU tests (CudaCodec GPU-vs-CPU equality on odd sizes, the GPU path, the discipline)
#   3. compute-sanitizer memcheck, racecheck and synccheck on the CUDA codec tests
#   4. trim-harness --ptr cuda --spin-kernel: NCCL's situation (a kernel spinning on the GPU
#      while the plugin moves the data): sendrecv exact, allreduce, mixed with trimming
#   5. real NCCL through the plugin: scripts/run_ddp.sh --bench allreduce --modes lossless,socket
#      with GPU buffers (NCCL_NET_GDR_LEVEL=SYS), then host buffers; a DDP digits job with random
#      trimming 0.5 on GPU buffers (replicas must stay identical)
#   6. trim-bench cuda --json (codec kernels against a D2D and a D2H copy of the same bytes)
# It prints a table, then, last, one JSON line: every step ok or failed, busbw per mode and
# size, sanitizer error counts, replicas identical.
#
# Usage: scripts/check-gpu.sh [--build DIR] [--out DIR] [--quick] [--skip STEP,...]
#   --build DIR   built tree with bin/ and lib/ [build]; built with make when missing
#   --out DIR     logs and results [DIR/check-gpu]
#   --quick       smaller benchmarks (for a second look)
#   --skip LIST   steps to leave out: tests,sanitizer,harness,nccl,bench
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build=build out="" quick=0 skip=""
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --skip) skip=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-gpu: unknown option $1" >&2; exit 2 ;;
  esac
done
cd "$repo"
[[ $build = /* ]] || build=$repo/$build
out=${out:-$build/check-gpu}
mkdir -p "$out"
out=$(cd "$out" && pwd)
steps=$out/steps.jsonl
: >"$steps"
skipped() { [[ ",$skip," == *",$1,"* ]]; }

# record STEP OK SECONDS [JSON-EXTRA]
record() {
  printf '{"step":"%s","ok":%s,"seconds":%s%s}\n' "$1" "$2" "$3" "${4:+,$4}" >>"$steps"
  printf 'check-gpu: %-28s %s (%ss)\n' "$1" "$([[ $2 == true ]] && echo ok || echo FAILED)" "$3" >&2
}

# step NAME LIMIT_S LOG COMMAND...: runs COMMAND with a time limit, logs, records ok/failed.
step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  local ok=true
  ((rc == 0)) || ok=false
  ((rc == 124 || rc == 137)) && echo "check-gpu: $name timed out after ${limit}s" >>"$log"
  record "$name" "$ok" "$((SECONDS - t0))" "\"rc\":$rc,\"log\":\"$(basename "$log")\""
  return "$rc"
}

# ---- 1. build
if [[ ! -x $build/bin/trim-tests || ! -f $build/lib/libnccl-net-trim.so ]]; then
  step build 900 "$out/build.log" make -j"$(nproc)" BUILD="$build" all "$build/bin/trim-tests"
fi
export TRIM_TEST_PLUGIN=$build/lib/libnccl-net-trim.so TRIM_TEST_SOURCE=$repo
tests=$build/bin/trim-tests

# Versions, for the record.
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 |
    awk -F', ' '{printf "{\"gpu\":\"%s\",\"driver\":\"%s\",\"memory\":\"%s\"", $1, $2, $3}'
  printf ',"commit":"%s"' "$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  printf ',"torch":"%s"' "$(python3 -c 'import torch;print(torch.__version__)' 2>/dev/null || echo none)"
  printf ',"nccl":"%s"}\n' "$(python3 -c 'import torch;print(".".join(map(str,torch.cuda.nccl.version())))' 2>/dev/null || echo none)"
} >"$out/versions.json"

# ---- 2. GPU tests
gpu_filter='CudaCodec*:CudaEmu*:HarnessGpuPath*:DeviceCodec*:DeviceStaging*:StagingArena*:DataPath*:CudaDiscipline*:PluginTest.PropertiesOfTheLoopbackDevice:Loopback*'
if ! skipped tests; then
  step gpu_tests 300 "$out/gpu_tests.log" "$tests" --gtest_filter="$gpu_filter"
  step all_tests 600 "$out/all_tests.log" "$tests"
fi

# ---- 3. sanitizers on the CUDA codec tests
san_json=""
if ! skipped sanitizer; then
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    log=$out/sanitizer_$tool.log
    step "sanitizer_$tool" 300 "$log" "$san" --tool "$tool" --error-exitcode 99 "$tests" --gtest_filter='CudaCodec*'
    n=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | awk '{s+=$3} END {print s+0}')
    san_json+="${san_json:+,}\"$tool\":$n"
  done
fi

# ---- 4. NCCL's situation in the harness: a spinning kernel while the plugin moves GPU data
if ! skipped harness; then
  h=$build/bin/trim-harness
  export NCCL_TRIM_TEST_CUDA_CHECK=on
  step spin_sendrecv 120 "$out/spin_sendrecv.log" "$h" --mode sendrecv --bytes 16M --ptr cuda --spin-kernel \
    --profiler none --timeout-ms 15000 --deadline-s 100 --json
  step spin_allreduce 120 "$out/spin_allreduce.log" "$h" --mode allreduce --ranks 2 --bytes 16M --ptr cuda \
    --spin-kernel --timeout-ms 15000 --deadline-s 100 --json
  step spin_mixed_trim 120 "$out/spin_mixed_trim.log" "$h" --mode mixed --ranks 2 --bytes 8M --iters 3 --trim 0.3 \
    --ptr cuda --spin-kernel --timeout-ms 15000 --deadline-s 100 --json
  unset NCCL_TRIM_TEST_CUDA_CHECK
fi

# ---- 5. real NCCL
if ! skipped nccl; then
  max=64M
  ((quick)) && max=16M
  step nccl_bench_gpu_buffers 300 "$out/nccl_bench_gpu.log" "$here/run_ddp.sh" --build "$build" --bench allreduce \
    --modes lossless,socket --out "$out/nccl_bench_gpu" -- --max-bytes "$max" --iters 5
  step nccl_bench_host_buffers 300 "$out/nccl_bench_host.log" "$here/run_ddp.sh" --build "$build" --bench allreduce \
    --modes lossless,socket --gdr-level unset --out "$out/nccl_bench_host" -- --max-bytes "$max" --iters 5
  step ddp_digits_random_0.5_gpu 300 "$out/ddp_digits.log" "$here/run_ddp.sh" --build "$build" --mode random \
    --trim-p 0.5 --task digits --epochs 3 --out "$out/ddp_digits"
fi

# ---- 6. kernel speed
if ! skipped bench; then
  args=(cuda --json)
  ((quick)) && args+=(--quick)
  step bench_cuda 300 "$out/bench_cuda.log" "$build/bin/trim-bench" "${args[@]}"
fi

# ---- table and the closing JSON line
python3 - "$out" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
steps = [json.loads(l) for l in open(os.path.join(out, "steps.jsonl")) if l.strip()]
res = {"bench": "check-gpu", "ok": all(s["ok"] for s in steps) and bool(steps),
       "steps": {s["step"]: s["ok"] for s in steps}}
try:
    res["versions"] = json.load(open(os.path.join(out, "versions.json")))
except Exception:
    pass
san = {}
for tool in ("memcheck", "racecheck", "synccheck"):
    p = os.path.join(out, f"sanitizer_{tool}.log")
    if os.path.exists(p):
        import re
        san[tool] = sum(int(m) for m in re.findall(r"ERROR SUMMARY: (\d+)", open(p, errors="replace").read()))
res["sanitizer_errors"] = san
busbw = {}
for buffers in ("gpu", "host"):
    for summ in glob.glob(os.path.join(out, f"nccl_bench_{buffers}", "*", "summary.json")):
        s = json.load(open(summ))
        mode = os.path.basename(os.path.dirname(summ))
        busbw.setdefault(buffers, {})[mode] = {str(e["bytes"]): round(e["busbw_GBps"], 3) for e in s.get("bench", [])}
res["busbw_GBps"] = busbw
rat = {}
for buffers, modes in busbw.items():
    sock = next((v for k, v in modes.items() if k.startswith("socket")), None)
    plug = next((v for k, v in modes.items() if k.startswith("lossless")), None)
    if sock and plug:
        rat[buffers] = {b: round(plug[b] / sock[b], 3) for b in plug if b in sock and sock[b] > 0}
res["lossless_over_socket"] = rat
ddp = os.path.join(out, "ddp_digits", "summary.json")
if os.path.exists(ddp):
    d = json.load(open(ddp))
    res["ddp_digits"] = {k: d.get(k) for k in ("status", "val_acc", "params_identical", "iter_p50_ms", "iter_p99_ms")}
    res["replicas_identical"] = d.get("params_identical")
spin = {}
for name in ("spin_sendrecv", "spin_allreduce", "spin_mixed_trim"):
    p = os.path.join(out, name + ".log")
    if os.path.exists(p):
        lines = [l for l in open(p, errors="replace") if l.startswith("{")]
        if lines:
            j = json.loads(lines[-1])
            spin[name] = {k: j.get(k) for k in ("verify", "replicas_identical", "data_path_violations", "device_msgs",
                                                "busbw_gbps", "error")}
res["spin_kernel"] = spin
bench = []
p = os.path.join(out, "bench_cuda.log")
if os.path.exists(p):
    for l in open(p, errors="replace"):
        if l.startswith("{"):
            j = json.loads(l)
            if "op" in j:
                bench.append({k: j[k] for k in ("scheme", "dtype", "op", "gbps", "baseline", "ratio")})
res["bench_cuda"] = bench

print(f"{'step':30} result")
for s in steps:
    print(f"{s['step']:30} {'ok' if s['ok'] else 'FAILED'}  ({s['seconds']} s)")
for buffers, modes in busbw.items():
    print(f"\nbusbw GB/s, {buffers} buffers")
    for mode, sizes in sorted(modes.items()):
        print(f"  {mode:28} " + "  ".join(f"{int(b) >> 20}M:{v}" for b, v in sorted(sizes.items(), key=lambda x: int(x[0]))))
    if buffers in rat:
        print(f"  {'lossless / socket':28} " + "  ".join(f"{int(b) >> 20}M:{v}" for b, v in sorted(rat[buffers].items(), key=lambda x: int(x[0]))))
if san:
    print("\nsanitizer errors:", san)
for b in bench:
    print(f"  {b['scheme']:5} {b['dtype']:5} {b['op']:14} {b['gbps']:8.1f} GB/s  {b['ratio']:.3f} of {b['baseline']}")
print(json.dumps(res, separators=(",", ":")))
sys.exit(0 if res["ok"] else 1)
EOF
