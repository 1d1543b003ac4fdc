#!/usr/bin/env bash
# profile.sh - `msched profile` end to end on the fake CUDA driver with the Compute Sanitizer
# stand-in (tests/shim/fake_sanitizer.c): tests/shim/profile_prog's kernels declare known
# touches, and the raw profile must hold exactly the version 2 records they imply: the kernel
# records of the sampled launches (first MSCHED_PROFILE_FIRST, then one in
# MSCHED_PROFILE_EVERY, per kernel), each followed by its touch records (64 KiB granules at
# each allocation's base, the last one clipped to its end, merged, attributed to the parameter offset of
# the pointer into the allocation or '-', modes r/w/rw) or marked opaque; alloc and free
# records; the program's exit status passed through. Then what `msched profile` learned from it
# (the rules in the store, a second run adding to it, a bad store left alone). Also: the
# profiler refusing without a Sanitizer library or after a Sanitizer error, and --show.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
MSCHED=${MSCHED:-$BUILD/bin/msched}
T=$BUILD/tests/shim
FAKE=$BUILD/lib/fakecuda/libcuda.so.1
SAN=$T/libsanitizer_fake.so
if [ ! -e "$FAKE" ] || [ ! -e "$BUILD/lib/msched/libcuda.so.1" ]; then
    echo "SKIP profile: libmsched and the fake driver are not built (no CUDA headers)"
    exit 0
fi
if [ ! -e "$SAN" ]; then
    echo "SKIP profile: no Compute Sanitizer headers at build time (the stand-in is not built)"
    exit 0
fi
if ! grep -q "ms_prof_patch = text_" "$BUILD/gen/prof_patch.c" 2>/dev/null; then
    echo "SKIP profile: the profiler's device patch is not built (no nvcc)"
    exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
failures=0
pass() { echo "PASS $1"; }
fail() {
    echo "FAIL $1${2:+ ($2)}"
    failures=$((failures + 1))
}
export MSCHED_REAL_LIBCUDA=$FAKE MS_FAKECUDA=$FAKE MSCHED_SANITIZER=$SAN
unset MSCHED_PROFILE MSCHED_PROFILE_FIRST MSCHED_PROFILE_EVERY MSCHED_VERBOSE LD_PRELOAD
export XDG_CACHE_HOME=$W/cache # the default store: never the user's

# check PROFILE BUFFERS EVERY TICKS: the profile against what profile_prog's kernels touched
check() {
    python3 - "$@" <<'PY'
import sys
prof, bufs, every, ticks = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(x) for x in sys.argv[4].split(",")]
G = 1 << 16
B = {}
for l in open(bufs):
    name, addr, size = l.split()
    B[name] = (int(addr, 16), int(size))
lines = open(prof).read().splitlines()
assert lines[0] == "msched-trace 2", lines[0]
task = lines[1].split()
assert task[0] == "task" and task[2:] == ["prio=0", "name=profile_prog"], lines[1]
pid = task[1]
def clip(buf, off, n):
    base, size = B[buf]
    a = base + off
    lo = base + (off // G) * G
    hi = min(base + size, base + ((off + n + G - 1) // G) * G)
    return (lo, hi - lo)
def t(arg, mode, buf, off, n):
    lo, size = clip(buf, off, n)
    return "touch %s %s %s 0x%x %d" % (pid, arg, mode, lo, size)
K = []  # (name, first pointer argument or None, prof, touches)
for n in (1, 16384, 16385, 100000):
    K.append(("scale", "A", "seen", [t(0, "rw", "A", 0, 4 * n)]))
K.append(("copy", "S", "seen", [t(0, "r", "S", 0, 80000), t(8, "w", "D", 0, 80000)]))
K.append(("submat", "M", "seen", [t(0, "r", "M", r * 262144 + 32, 64) for r in range(2, 6)]))
K.append(("chase", "T", "seen", [t(0, "r", "T", 0, 8), t("-", "r", "C", 131072, 4)]))
K.append(("two", "E", "seen", [t(0, "r", "E", 0, 4), t(8, "w", "E", 1 << 20, 4)]))
K.append(("nop", None, "seen", []))
K.append(("cluster_k", "A", "opaque", []))
K.append(("tma_k", "A", "opaque", []))
for i in ticks:
    K.append(("tick", "B", "seen", [t(0, "w", "B", i * G, 4)]))
K.append(("pstruct", None, "seen", [t(8, "r", "S", 0, 12000), t(16, "w", "D", 0, 12000)]))
allocs = ["alloc %s 0x%x %d device" % (pid, B[b][0], B[b][1]) for b in "ASDMTCEB"]
assert lines[2:10] == allocs, lines[2:10]
assert lines[-1] == "free %s 0x%x" % (pid, B["C"][0]), lines[-1]
body = lines[10:-1]
got, mods = [], set()
for l in body:
    f = l.split()
    if f[0] == "kernel":
        assert f[1] == pid and f[2] == "0" and f[4:6] == ["grid=1,1,1", "block=32,1,1"], l
        kv = dict(x.split("=", 1) for x in f[6:])
        p = bytes.fromhex(kv["params"])
        ptr = int.from_bytes(p[:8], "little") if len(p) >= 8 and kv["name"] != "pstruct" else None
        mods.add(kv.get("mod"))
        got.append([kv["name"], ptr, kv["prof"], []])
    else:
        assert f[0] == "touch" and got, l
        got[-1][3].append(l)
want = [[n, B[p][0] if p else None, pr, sorted(ts, key=lambda s: int(s.split()[4], 16))]
        for n, p, pr, ts in K]
for g, w in zip(got, want):
    assert g == w, "got %s\nwant %s" % (g, w)
assert len(got) == len(want), (len(got), len(want), [g[0] for g in got])
assert len(mods) == 1 and None not in mods and "0" not in mods, mods
print("ok: %d kernel records" % len(got))
PY
}

# 1. one in 5 after the first 4 (default): ticks 0-3 then 8, 13, ..., 38; exit status 7 passes
out=$("$MSCHED" profile --raw "$W/p5.prof" --out "$W/store" -- env MSCHED_PROFILE_EVERY=5 \
    "$T/profile_prog" 7 2>"$W/p5.err" >"$W/bufs")
rc=$?
if [ $rc = 7 ] && check "$W/p5.prof" "$W/bufs" 5 0,1,2,3,8,13,18,23,28,33,38 >"$W/p5.chk" 2>&1; then
    pass "profile/records (exact kernel and touch records, first 4 then one in 5, exit 7 passed on)"
else
    fail profile/records "rc=$rc: $(tail -n 4 "$W/p5.chk" "$W/p5.err" 2>/dev/null | tr '\n' ' ')"
fi
grep -q "msched: profile: 10 kernels in $W/store (10 new)" "$W/p5.err" ||
    fail profile/learn-message "$(cat "$W/p5.err")"

# 1b. what was learned from it (docs/templates.md): the rules profile_prog's kernels imply
"$MSCHED" profile --show "$W/store" >"$W/show" 2>&1
"$MSCHED" profile --show --text "$W/store" >"$W/text" 2>&1
learned() { grep -A1 "^$1 (module" "$W/show" | tail -n 1; }
ok=1
# (scale: 4 or 5 bytes an element: 64 KiB granules over at most 400 KB leave the slope between)
learned scale | grep -Eq 'pointer @0: linear, bytes \[P \+ 0, P \+ [0-9]+ \+ [45]\*x@8\); written; 4 launches' || ok=0
learned tick | grep -Eq 'pointer @0: linear, bytes \[P \+ -?[0-9]+ \+ 65536\*x@8, P \+ [0-9]+ \+ 65536\*x@8\); written; 11 launches' || ok=0
# (a struct parameter: each pointer word in it is an argument of its own)
grep -A2 "^pstruct (module" "$W/show" | grep -Eq 'pointer @8: fixed, bytes \[P \+ 0, P \+ 65536\); read-only; 1 launches' || ok=0
grep -A2 "^pstruct (module" "$W/show" | grep -Eq 'pointer @16: fixed, bytes \[P \+ 0, P \+ 65536\); written; 1 launches' || ok=0
learned submat | grep -Eq 'pointer @0: strided, .* repeated 4 times every 262144 bytes; read-only' || ok=0
grep -q '^chase (module .*reaches memory no argument names: whole allocations' "$W/show" || ok=0
grep -q '^cluster_k (module .*opaque' "$W/show" || ok=0
[ "$(grep -c '^kernel ' "$W/text")" = 10 ] && [ "$(head -n 1 "$W/text")" = "msched-templates 1" ] || ok=0
if [ $ok = 1 ]; then
    pass "profile/learned (linear, strided, unsafe and opaque kernels; the store's text)"
else
    fail profile/learned "$(cat "$W/show")"
fi
# a second profile of the same program refits over both: nothing new, twice the launches
"$MSCHED" profile --out "$W/store" -- env MSCHED_PROFILE_EVERY=5 "$T/profile_prog" 0 \
    >/dev/null 2>"$W/p5b.err"
if grep -q "10 kernels in $W/store (0 new)" "$W/p5b.err" &&
    "$MSCHED" profile --show "$W/store" | grep -q '^scale (module [0-9a-f]*): 8 profiled launches'; then
    pass "profile/incremental (a second run adds to the store)"
else
    fail profile/incremental "$(cat "$W/p5b.err")"
fi
# a store that is not one is never overwritten
echo "not a store" >"$W/bad"
"$MSCHED" profile --out "$W/bad" -- "$T/profile_prog" 0 >/dev/null 2>"$W/bad.err"
rc=$?
if [ $rc = 1 ] && [ "$(cat "$W/bad")" = "not a store" ] &&
    grep -q "the template store $W/bad is not valid (.*line 1" "$W/bad.err"; then
    pass "profile/bad-store (refused, left as it was)"
else
    fail profile/bad-store "rc=$rc: $(cat "$W/bad.err")"
fi

# 2. the defaults (4, then one in 32: tick 35), MSCHED_PROFILE_FIRST=4 spelled out, exit 0;
#    the temporary raw profile is removed
export TMPDIR=$W/tmp
mkdir -p "$TMPDIR"
"$MSCHED" profile --raw "$W/d.prof" -- "$T/profile_prog" 0 >"$W/bufs" 2>"$W/d.err"
rc=$?
if [ $rc = 0 ] && check "$W/d.prof" "$W/bufs" 32 0,1,2,3,35 >"$W/d.chk" 2>&1; then
    pass "profile/default-sampling (first 4, then one in 32)"
else
    fail profile/default-sampling "rc=$rc: $(tail -n 4 "$W/d.chk" "$W/d.err" | tr '\n' ' ')"
fi
# --learn: the kept raw profile learned into a fresh store gives the store the run wrote (the
# default one, which only this run has written so far); a missing profile changes nothing
cp "$W/cache/msched/templates" "$W/d.store" 2>/dev/null
"$MSCHED" profile --learn "$W/d.prof" --out "$W/relearned" >/dev/null 2>"$W/l.err"
rc=$?
"$MSCHED" profile --learn "$W/none.prof" --out "$W/relearned" >/dev/null 2>"$W/l2.err"
rc2=$?
grep -q "cannot read the raw profile $W/none.prof" "$W/l2.err" || rc2="$rc2 ($(cat "$W/l2.err"))"
"$MSCHED" profile --learn "$W/d.prof" --evaluate "$W/d.prof" >/dev/null 2>&1
rc3=$?
if [ $rc = 0 ] && [ $rc2 = 1 ] && [ $rc3 = 2 ] && [ -s "$W/d.store" ] &&
    cmp -s "$W/d.store" "$W/relearned" && grep -q "10 kernels in $W/relearned (10 new)" "$W/l.err"; then
    pass "profile/learn (a kept raw profile relearned: the same store; usage and missing-file errors)"
else
    fail profile/learn "rc=$rc,$rc2,$rc3: $(cat "$W/l.err"; diff "$W/d.store" "$W/relearned" | head -5)"
fi
# ... the same with the shim preloaded (the program opens the fake driver by name); not in
# sanitizer builds, whose runtime must come first in LD_PRELOAD while msched puts libmsched first
if ldd "$T/profile_prog" 2>/dev/null | grep -Eq 'libasan|libtsan'; then
    echo "SKIP profile/preload (sanitizer build)"
else
    LD_LIBRARY_PATH=$BUILD/lib/fakecuda "$MSCHED" profile --preload --raw "$W/pre.prof" -- \
        "$T/profile_prog" 5 >"$W/bufs" 2>"$W/pre.err"
    rc=$?
    if [ $rc = 5 ] && check "$W/pre.prof" "$W/bufs" 32 0,1,2,3,35 >"$W/pre.chk" 2>&1; then
        pass "profile/preload (same records with --preload, exit 5 passed on)"
    else
        fail profile/preload "rc=$rc: $(tail -n 4 "$W/pre.chk" "$W/pre.err" | tr '\n' ' ')"
    fi
fi
"$MSCHED" profile -- "$T/profile_prog" 0 >/dev/null 2>"$W/t.err"
rc=$?
if [ $rc = 0 ] && [ -z "$(ls -A "$TMPDIR")" ] && grep -q "10 kernels in $W/cache/msched/templates" "$W/t.err"; then
    pass "profile/temporary-raw (used, then removed)"
else
    fail profile/temporary-raw "rc=$rc: $(ls -A "$TMPDIR") $(cat "$W/t.err")"
fi

# 2b. --evaluate: the store learned in 1 (other launches sampled, other allocations) against the
#     profile of 2: templates miss only what allocation granularity misses too (chase's touch
#     through a pointer in memory) and predict little beyond what was touched
"$MSCHED" profile --evaluate "$W/d.prof" --out "$W/store" >"$W/ev" 2>&1
rc=$?
if [ $rc = 0 ] && python3 - "$W/ev" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
a = re.search(r"allocation granularity: ([0-9.]+) MiB predicted, false negatives ([0-9.]+) %, false positives ([0-9.]+) %", t)
m = re.search(r"templates \((\d+) of (\d+) launches had one\): ([0-9.]+) MiB predicted, false negatives ([0-9.]+) %, false positives ([0-9.]+) %", t)
n = re.search(r"(\d+) profiled launches \((\d+) opaque", t)
assert a and m and n, t
assert n.group(1) == "15" and n.group(2) == "2", t          # 17 sampled: cluster_k, tma_k opaque
assert m.group(1) == "14", t                                # chase is unsafe: no template
assert m.group(4) == a.group(2) and float(a.group(2)) > 0, t  # the same misses (chase)
assert float(m.group(5)) < 10 and float(a.group(3)) > 90, t
# the ranking names chase first among the misses, as a kernel without a template
assert re.search(r"most missed with templates:\n    \S*chase\S*: \d+ launches \(no template", t), t
PY
then
    pass "profile/evaluate (templates: the misses of allocation granularity, false positives under 10 %)"
else
    fail profile/evaluate "rc=$rc: $(cat "$W/ev")"
fi
"$MSCHED" profile --evaluate "$W/d.prof" --out "$W/store" -- true >/dev/null 2>&1
[ $? = 2 ] || fail profile/evaluate-usage "--evaluate with a program: not a usage error"
"$MSCHED" profile --evaluate "$W/none.prof" --out "$W/store" >/dev/null 2>"$W/ev.err"
[ $? = 1 ] && grep -q "cannot read the raw profile $W/none.prof" "$W/ev.err" ||
    fail profile/evaluate-missing "$(cat "$W/ev.err")"

# 3. MSCHED_PROFILE_FIRST=1 MSCHED_PROFILE_EVERY=1000: only the first launch of each kernel
env MSCHED_PROFILE_FIRST=1 MSCHED_PROFILE_EVERY=1000 "$MSCHED" profile --raw "$W/f1.prof" -- \
    "$T/profile_prog" 3 >/dev/null 2>"$W/f1.err"
rc=$?
n=$(grep -c '^kernel' "$W/f1.prof" 2>/dev/null)
names=$(awk '/^kernel/ { sub("name=", "", $7); printf "%s ", $7 }' "$W/f1.prof" 2>/dev/null)
if [ $rc = 3 ] && [ "$n" = 10 ] &&
    [ "$names" = "scale copy submat chase two nop cluster_k tma_k tick pstruct " ]; then
    pass "profile/first-only (one launch of each of the 10 kernels, exit 3 passed on)"
else
    fail profile/first-only "rc=$rc n=$n names=$names"
fi

# 4. no Sanitizer library: said once, the program runs, the profile is empty: status 1
MSCHED_SANITIZER=$W/none.so "$MSCHED" profile --raw "$W/n.prof" -- "$T/profile_prog" 0 \
    >/dev/null 2>"$W/n.err"
rc=$?
if [ $rc = 1 ] && [ "$(grep -c 'MSCHED_PROFILE: not profiling: cannot load libsanitizer' "$W/n.err")" = 1 ] &&
    grep -Eq "is empty|no raw profile" "$W/n.err"; then
    pass "profile/no-sanitizer (refused once, exit 1)"
else
    fail profile/no-sanitizer "rc=$rc: $(cat "$W/n.err")"
fi

# 5. a Sanitizer error inside a launch stops profiling; the program runs on to its end
FAKE_SANITIZER_FAIL=sanitizerMemcpyDeviceToHost "$MSCHED" profile --raw "$W/e.prof" -- \
    "$T/profile_prog" 0 >/dev/null 2>"$W/e.err"
rc=$?
if [ $rc = 0 ] && grep -q "MSCHED_PROFILE: profiling stops: reading the touches back" "$W/e.err" &&
    ! grep -q '^kernel' "$W/e.prof" && [ "$(grep -c '^alloc ' "$W/e.prof")" = 8 ] &&
    [ "$(tail -n 1 "$W/e.prof")" = "# profiling stopped: reading the touches back: sanitizerMemcpyDeviceToHost: fake Sanitizer error" ]; then
    pass "profile/sanitizer-error (profiling stops, the program finishes)"
else
    fail profile/sanitizer-error "rc=$rc: $(cat "$W/e.err")"
fi

# 6. the engine must be off: MSCHED_PROFILE alone under the VMM engine is refused once
env LD_LIBRARY_PATH="$BUILD/lib/msched" MSCHED_DAEMON=off MSCHED_ENGINE=vmm MSCHED_BUDGET=1GiB \
    MSCHED_PROFILE="$W/v.prof" "$T/profile_prog" 0 >/dev/null 2>"$W/v.err"
rc=$?
if [ $rc = 0 ] && grep -q "MSCHED_PROFILE: not profiling: it needs MSCHED_ENGINE=off" "$W/v.err" &&
    [ ! -e "$W/v.prof" ]; then
    pass "profile/engine-on-refused"
else
    fail profile/engine-on-refused "rc=$rc: $(cat "$W/v.err")"
fi

# 7. --show: the store at $XDG_CACHE_HOME/msched/templates, or FILE; usage errors
export XDG_CACHE_HOME=$W/cache7
"$MSCHED" profile --show >/dev/null 2>"$W/s.err"
rc=$?
mkdir -p "$W/cache7/msched" && cp "$W/store" "$W/cache7/msched/templates"
o1=$("$MSCHED" profile --show | head -n 1)
printf 'msched-templates 1\n' >"$W/other"
o2=$("$MSCHED" profile --show --text "$W/other")
"$MSCHED" profile --show "$W/other" -- true >/dev/null 2>&1
rc2=$?
"$MSCHED" profile >/dev/null 2>&1
rc3=$?
if [ $rc = 1 ] && grep -q "cannot read the template store $W/cache7/msched/templates: No such file" "$W/s.err" &&
    [ "$o1" = "# $W/cache7/msched/templates: 10 kernels" ] && [ "$o2" = "msched-templates 1" ] &&
    [ $rc2 = 2 ] && [ $rc3 = 2 ]; then
    pass "profile/show (default store path, FILE, usage errors)"
else
    fail profile/show "rc=$rc rc2=$rc2 rc3=$rc3 o1=$o1 o2=$o2: $(cat "$W/s.err")"
fi
env -u XDG_CACHE_HOME HOME="$W/home" "$MSCHED" profile --show >/dev/null 2>"$W/h.err"
grep -q "cannot read the template store $W/home/.cache/msched/templates" "$W/h.err" ||
    fail profile/show-home "$(cat "$W/h.err")"
env -u XDG_CACHE_HOME -u HOME "$MSCHED" profile --show >/dev/null 2>&1
[ $? = 2 ] || fail profile/show-no-home "neither XDG_CACHE_HOME nor HOME: not a usage error"
"$MSCHED" help profile | grep -q "usage: msched profile" || fail profile/help

[ $failures = 0 ] || { echo "$failures profile check(s) failed"; exit 1; }
exit 0
