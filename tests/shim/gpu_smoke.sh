#!/usr/bin/env bash
# tests/shim/gpu_smoke.sh - libmsched on a real GPU: one PyTorch program, run without libmsched,
# with it first on LD_LIBRARY_PATH, and preloaded. Needs a GPU, PyTorch and the CUDA toolkit, so
# it is not part of `make test` (CI has no GPU); run it by hand on a GPU machine.
#
# Checks, one "PASS name" / "FAIL name" line each: the program's result digest is the same in
# all three runs; under libmsched it saw launches, allocations and copies, handed out hooks
# through cuGetProcAddress (cudart's path), and wrote a trace the core's reader accepts.
# Logs go to $OUT (default: a temporary directory, printed at the end).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
TARGETS=(shim "$BUILD/tests/shim/trace_check") # as the Makefile names them
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
OUT=${OUT:-$(mktemp -d)}
make -s "${TARGETS[@]}" >"$OUT/build.log" 2>&1 || {
    echo "FAIL build"
    tail -n 20 "$OUT/build.log"
    exit 1
}
SHIMDIR=$BUILD/lib/msched

read -r -d '' PROGRAM <<'EOF'
import hashlib, json
import torch
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
a = torch.randn(1024, 1024, device="cuda")
b = torch.randn(1024, 1024, device="cuda")
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    c = a @ b
    d = torch.relu(c) + 1
    e = d.sum(dim=0)
    f = torch.empty(1 << 20, device="cuda").fill_(3)
    torch.cuda.synchronize()
kernels = sum(1 for ev in prof.events() if "CUDA" in str(getattr(ev, "device_type", ""))
              and not (ev.name or "").startswith(("Memcpy", "Memset")))
h = hashlib.sha256(e.cpu().numpy().tobytes() + f.sum().cpu().numpy().tobytes()).hexdigest()
print(json.dumps({"digest": h[:16], "profiled_kernels": kernels}), flush=True)
EOF

failures=0
check() {
    if eval "$2"; then echo "PASS $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}
value() { grep -o "\b$1=[0-9]*" "$2" | tail -n 1 | cut -d= -f2; }

python3 -c "$PROGRAM" >"$OUT/plain.out" 2>"$OUT/plain.err"
env LD_LIBRARY_PATH="$SHIMDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MSCHED_VERBOSE=1 \
    MSCHED_TRACE="$OUT/path.trace" python3 -c "$PROGRAM" >"$OUT/path.out" 2>"$OUT/path.err"
env LD_PRELOAD="$SHIMDIR/libmsched.so" MSCHED_VERBOSE=1 MSCHED_TRACE="$OUT/preload.trace" \
    python3 -c "$PROGRAM" >"$OUT/preload.out" 2>"$OUT/preload.err"

ref=$(grep -o '"digest": "[0-9a-f]*"' "$OUT/plain.out")
for m in path preload; do
    check "$m/same-result" '[ -n "$ref" ] && grep -qF "$ref" "$OUT/$m.out"'
    check "$m/real-driver" 'grep -q "real driver: " "$OUT/$m.err"'
    check "$m/saw-launches" '[ "$(value launches "$OUT/$m.err")" -gt 0 ] 2>/dev/null'
    check "$m/saw-allocs" '[ "$(value allocs "$OUT/$m.err")" -gt 0 ] 2>/dev/null'
    check "$m/saw-copies" '[ "$(value copies "$OUT/$m.err")" -gt 0 ] 2>/dev/null'
    check "$m/procaddr-hooks" '[ "$(value procaddr_hooked "$OUT/$m.err")" -gt 0 ] 2>/dev/null'
    check "$m/trace-parses" '"$BUILD/tests/shim/trace_check" "$OUT/$m.trace" >"$OUT/$m.tc"'
    grep -h "summary\|real driver" "$OUT/$m.err" | sed 's/^/    /'
    grep -h "^COUNT" "$OUT/$m.tc" 2>/dev/null | sed 's/^/    /'
done
sed 's/^/    plain: /' "$OUT/plain.out"
sed 's/^/    path: /' "$OUT/path.out"
echo "logs in $OUT"
[ $failures -eq 0 ]
