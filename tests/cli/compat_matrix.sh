#!/usr/bin/env bash
# tests/cli/compat_matrix.sh - the compatibility suite's tools without a GPU:
#  1. bench/compat/make_matrix.py on the hand-written records of tests/bench/fixtures/compat/
#     (README.md there works out every cell): the summary counts, each row, the group of three,
#     the notes; a second run changes nothing; --check exits 0 when fresh and 1 after an edit
#     (writing nothing); a malformed JSON line and an empty input exit 2.
#  2. bench/compat/run_compat.py with stub programs, a stand-in `msched` (records its arguments,
#     then runs the program) and a stand-in `mschedd` (makes its socket, waits for SIGTERM): the
#     budgets of each mode, the daemon's socket handed to the trio, the records' fields, --list,
#     --resume, the deadline (exit 3 and the command that continues) and a failing program; then
#     make_matrix.py on what it wrote.
#  3. The suite itself: at least 22 programs in bench/compat/programs.txt, each one's script or
#     .cu source present, every Python file compiles.
# Run from the repository root (tests/run.sh does); needs python3 and bash only.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FIX=$ROOT/tests/bench/fixtures/compat
MM=$ROOT/bench/compat/make_matrix.py
RC=$ROOT/bench/compat/run_compat.py
PY=${PYTHON:-python3}
T=$(mktemp -d /tmp/msched-compat.XXXXXX)
trap 'rm -rf "$T"' EXIT

fail() {
    echo "FAIL: $*"
    for f in "$T"/*.err; do
        [ -s "$f" ] || continue
        echo "--- $(basename "$f")"
        tail -n 15 "$f"
    done
    exit 1
}
pass() { echo "ok: $*"; }
has() { grep -qF -- "$2" "$1" || fail "$(basename "$1") lacks: $2"; }

# --- 1. the matrix from the fixtures
"$PY" "$MM" "$FIX" --out "$T/m.md" >/dev/null 2>"$T/mm1.err" || fail "make_matrix exited $?"
M=$T/m.md
has "$M" "- NVIDIA H200, 143771 MiB, 580.159.04; Build cuda_13.0.r13.0/compiler.36424714_0; PyTorch 2.11.0+cu130; msched abc1234"
has "$M" "| native | 2 | 1 | 0 | 1 | 0 | 1.00x |"
has "$M" "| engine on, budget above footprint | 2 | 1 | 0 | 0 | 1 | 1.10x |"
has "$M" "| alone, budget half the footprint | 0 | 0 | 1 | 1 | 2 | 3.00x |"
has "$M" "| three at once, 150 % | 2 | 0 | 0 | 1 | 1 | 2.00x |"
pass "summary counts and median ratios"
has "$M" "| torch_train_mlp | ok, 2 runs identical, 11.0 s, 2300 MiB | identical, 1.20x | different, 3.00x | identical, 2.00x |"
has "$M" "| cupy_fft | ok, 8.0 s, 2600 MiB | close, 1.10x | failed (exit 1) | failed (time limit) |"
has "$M" "| jax_platform | ok, runs close to each other (2 runs), 6.0 s, 1200 MiB | identical, 1.10x | - | identical, 2.00x |"
has "$M" "| zz_custom | failed (exit 139) | - | - | - |"
[ "$(grep -n '^| torch_train_mlp |' "$M" | cut -d: -f1)" -lt "$(grep -n '^| cupy_fft |' "$M" | cut -d: -f1)" ] ||
    fail "rows not in programs.txt order"
[ "$(grep -n '^| jax_platform |' "$M" | cut -d: -f1)" -lt "$(grep -n '^| zz_custom |' "$M" | cut -d: -f1)" ] ||
    fail "a program missing from programs.txt is not last"
pass "rows: identical, close, different, failed, not run; native repeats; program order"
has "$M" "| torch_train_mlp, cupy_fft, jax_platform | 6100 MiB | 4067 MiB | 30.0 s | 25.0 s | 1 |"
has "$M" "- torch_train_mlp, alone, budget half the footprint: different: \`ffffffffffff... 2.6 1.25\` against native \`aaaaaaaaaaaa... 2.5 1.25\`"
has "$M" "- cupy_fft, alone, budget half the footprint: exit 1: \`cupy.cuda.cufft.CuFFTError: CUFFT_INTERNAL_ERROR\`"
has "$M" "- cupy_fft, three at once, 150 %: time limit (540 s)"
has "$M" "- jax_platform, native: repeated native runs were close: the program is not bit-deterministic by itself"
has "$M" "- zz_custom, engine on, budget above footprint: skipped: no native footprint"
pass "group of three and notes"

cp "$M" "$T/first.md"
"$PY" "$MM" "$FIX" --out "$M" >/dev/null 2>"$T/mm2.err" || fail "second run exited $?"
cmp -s "$M" "$T/first.md" || fail "a second run changed the page"
"$PY" "$MM" "$FIX" --out "$M" --check 2>"$T/check0.err" || fail "--check on a fresh page exited $?"
sed -i 's/identical, 1.20x/identical, 1.21x/' "$M"
cp "$M" "$T/edited.md"
"$PY" "$MM" "$FIX" --out "$M" --check 2>"$T/check1.err"
[ $? = 1 ] || fail "--check on an edited page did not exit 1"
cmp -s "$M" "$T/edited.md" || fail "--check wrote the page"
mkdir -p "$T/bad"
cp "$FIX"/*.jsonl "$T/bad/"
printf '{"suite": "compat", "program": "x",\n' >>"$T/bad/modes.jsonl"
"$PY" "$MM" "$T/bad" --out "$T/bad.md" 2>"$T/bad.err"
[ $? = 2 ] || fail "a malformed JSON line did not exit 2"
has "$T/bad.err" "modes.jsonl:$(wc -l <"$T/bad/modes.jsonl"): malformed JSON"
[ -e "$T/bad.md" ] && fail "a page was written despite the malformed line"
mkdir -p "$T/empty"
"$PY" "$MM" "$T/empty" --out "$T/empty.md" 2>"$T/empty.err"
[ $? = 2 ] || fail "no records did not exit 2"
has "$T/empty.err" "no compat records"
grep -q Traceback "$T"/*.err && fail "a Python traceback"
pass "idempotent; --check 0 / 1; malformed JSON and no records exit 2"

# --- 2. the runner with stubs
S=$T/stub
mkdir -p "$S"
cat >"$S/prog.sh" <<'EOF'
#!/usr/bin/env bash
# NAME FOOTPRINT SLEEP [fail]: a stand-in compatibility program
echo "starting $1"
[ -n "${MSCHED_SOCKET:-}" ] && { [ -S "$MSCHED_SOCKET" ] || [ -e "$MSCHED_SOCKET" ]; } && echo "socket ok" >&2
sleep "$3"
[ "${4:-}" = fail ] && { echo "RuntimeError: stub failure" >&2; exit 3; }
echo "FOOTPRINT_MIB $2"
echo "INFO stub=1 env_x=${STUB_X:-unset}"
echo "RESULT $1 $(printf '%064d' "$2") tol=1e-05 $2 0.5"
EOF
cat >"$S/msched" <<'EOF'
#!/usr/bin/env bash
echo "msched $*" >>"${STUB_LOG:?}"
while [ "$1" != "--" ]; do shift; done
shift
exec "$@"
EOF
cat >"$S/mschedd" <<'EOF'
#!/usr/bin/env bash
echo "mschedd $*" >>"${STUB_LOG:?}"
while [ $# -gt 0 ]; do [ "$1" = --socket ] && sock=$2; shift; done
: >"$sock"
trap 'rm -f "$sock"; exit 0' TERM
while :; do sleep 0.05; done
EOF
chmod +x "$S/prog.sh" "$S/msched" "$S/mschedd"
cat >"$S/programs.txt" <<EOF
# stub list
alpha yes -           $S/prog.sh alpha 1000 0.1
beta  yes STUB_X=7    $S/prog.sh beta 3000 0.1
gamma yes -           $S/prog.sh gamma 500 0.1 fail
delta no  -           $S/prog.sh delta 100000 0.1
eps   yes -           $S/prog.sh eps 600 0.1
EOF
export STUB_LOG=$S/calls.log
run() { "$PY" "$RC" --programs "$S/programs.txt" --msched "$S/msched" --mschedd "$S/mschedd" "$@"; }

run --list --only beta,delta >"$T/list.out" 2>"$T/list.err" || fail "--list exited $?"
[ "$(wc -l <"$T/list.out")" = 2 ] || fail "--list --only beta,delta printed $(wc -l <"$T/list.out") lines"
has "$T/list.out" "env=STUB_X=7"
run --list --only nosuch >/dev/null 2>"$T/unknown.err" && fail "--only with an unknown name succeeded"
has "$T/unknown.err" "unknown program 'nosuch'"
pass "--list and --only"

run "$T/out" --deadline 0 >"$T/run.out" 2>"$T/run.err" || fail "the stub run exited $?"
n_files=$(find "$T/out" -type f | wc -l)
[ "$n_files" = 5 ] || fail "expected 4 JSONL files and one log archive, found $n_files"
tar tzf "$T/out"/compat-logs-*.tgz >"$T/tar.txt" || fail "the log archive does not list"
grep -q 'beta.native.0.err' "$T/tar.txt" || fail "the archive lacks beta's native stderr"
grep -q 'mschedd.log' "$T/tar.txt" || fail "the archive lacks the trio's mschedd log"
"$PY" - "$T/out" "$STUB_LOG" <<'EOF' || fail "the runner's records"
import glob, json, math, sys
out, calls = sys.argv[1], open(sys.argv[2]).read()
recs = {}
for f in glob.glob(out + "/compat-*.jsonl"):
    lines = [json.loads(l) for l in open(f)]
    assert lines[0].get("kind") == "env", f
    for r in lines[1:]:
        recs.setdefault((r["program"], r["mode"]), []).append(r)
def one(p, m):
    rs = recs.get((p, m), [])
    assert len(rs) == 1, (p, m, rs)
    return rs[0]
a = one("alpha", "native")
assert a["rc"] == 0 and a["footprint_mib"] == 1000 and a["result"].startswith("0" * 60), a
assert a["result_name"] == "alpha" and a["result_last"] and a["info"].startswith("stub=1"), a
assert one("beta", "native")["info"].endswith("env_x=7"), "the entry's env was not set"
g = one("gamma", "native")
assert g["rc"] == 3 and g["result"] is None and "stub failure" in g["stderr_tail"], g
assert one("gamma", "big").get("skipped") == "no native footprint"
# big: max(2 x fp, fp + 2048), capped at 130 GiB; half: fp / 2
assert one("alpha", "big")["budget_mib"] == 3048, one("alpha", "big")
assert one("beta", "big")["budget_mib"] == 6000
assert one("delta", "big")["budget_mib"] == 133120
assert one("alpha", "half")["budget_mib"] == 500 and one("beta", "half")["budget_mib"] == 1500
assert "msched run --no-daemon --budget 3048MiB -- " in calls, calls
assert "msched run --no-daemon --budget 500MiB -- " in calls
# trio: alpha, beta, eps (delta is alone-only, gamma has no footprint); 4600 / 1.5 -> 3067
t = [one(p, "trio") for p in ("alpha", "beta", "eps")]
assert all(r["group"] == ["alpha", "beta", "eps"] for r in t), t
assert all(r["group_budget_mib"] == math.ceil(4600 / 1.5) for r in t)
assert all(r["rc"] == 0 and "socket ok" in r["stderr_tail"] for r in t), t
assert ("delta", "trio") not in recs
assert "mschedd --socket " in calls and "--budget 3067MiB --foreground" in calls, calls
assert "msched run -- " in calls
assert all(r["group_id"] == t[0]["group_id"] and r["group_wall_s"] > 0 for r in t)
EOF
pass "native, big, half, trio: budgets, env, socket, records, logs"

"$PY" "$MM" "$T/out" --out "$T/stub.md" >/dev/null 2>"$T/mm3.err" || fail "make_matrix on the runner's records exited $?"
has "$T/stub.md" "| alpha | ok, "
grep -q '^| alpha | ok, [0-9.]* s, 1000 MiB | identical, [0-9.]*x | identical, [0-9.]*x | identical, [0-9.]*x |$' "$T/stub.md" ||
    fail "alpha's row: $(grep '^| alpha' "$T/stub.md")"
grep -q '^| gamma | failed (exit 3) | - | - | - |$' "$T/stub.md" || fail "gamma's row: $(grep '^| gamma' "$T/stub.md")"
grep -q '^| delta | ok, .* | identical, .* | identical, .* | - |$' "$T/stub.md" || fail "delta's row: $(grep '^| delta' "$T/stub.md")"
pass "make_matrix on the runner's own records"

: >"$STUB_LOG"
run "$T/out2" --mode native --mode big --from "$T/out" --resume --deadline 0 >/dev/null 2>"$T/resume.err" ||
    fail "--resume exited $?"
grep -q "prog.sh" "$STUB_LOG" && fail "--resume ran programs again: $(cat "$STUB_LOG")"
has "$T/resume.err" "native: --resume skips 5 programs already run"
has "$T/resume.err" "big: --resume skips 4 programs already run"
# gamma failed natively: it has a native record (not run again), and no big one (no footprint)
pass "--resume"
# The default directory's records give footprints but never count as done: they are another
# build's (a resumed call once skipped every program the published matrix had run).
: >"$STUB_LOG"
COMPAT_DEFAULT_FROM="$T/out" run "$T/out3" --mode big --only alpha --resume --deadline 0 \
    >/dev/null 2>"$T/resume3.err" || fail "--resume over the default directory exited $?"
grep -q "resume skips" "$T/resume3.err" && fail "--resume skipped the default directory's runs: $(cat "$T/resume3.err")"
grep -q "prog.sh" "$STUB_LOG" || fail "--resume did not run alpha: $(cat "$T/resume3.err")"
grep -q '"budget_mib"' "$T"/out3/compat-big-*.jsonl || fail "no big record with a budget from the default directory's native"
pass "--resume ignores the default directory's records, which still give the footprints"

mkdir -p "$T/slow"
sed 's/ 0\.1/ 2/' "$S/programs.txt" >"$S/slow.txt"
# the first native run's records give each program an expected 0.1-0.2 s; these take 2 s each,
# so after the first one the 1 s deadline has passed
"$PY" "$RC" --programs "$S/slow.txt" --msched "$S/msched" --mschedd "$S/mschedd" "$T/slow" \
    --mode native --from "$T/out" --deadline 1 >/dev/null 2>"$T/deadline.err"
[ $? = 3 ] || fail "a run past its deadline did not exit 3"
has "$T/deadline.err" "bench/compat/run_compat.sh OUT --mode native --only beta,gamma,delta,eps"
grep -c '"program"' "$T/slow"/compat-native-*.jsonl | grep -qx 1 || fail "more than one program ran before the deadline"
pass "the deadline: exit 3 and the command that continues"

# --- 3. the suite
P=$ROOT/bench/compat/programs.txt
n=$(grep -cv '^\s*\(#\|$\)' "$P")
[ "$n" -ge 22 ] || fail "only $n programs in programs.txt"
while read -r name trio _env cmd; do
    case $name in '#'* | '') continue ;; esac
    [ "$trio" = yes ] || [ "$trio" = no ] || fail "$name: trio column '$trio'"
    case $cmd in
    python3\ *) f=${cmd#python3 }; f=${f%% *}; [ -f "$ROOT/$f" ] || fail "$name: no $f" ;;
    \{bin\}/*) f=${cmd#\{bin\}/}; f=${f%% *}; [ -f "$ROOT/bench/compat/$f.cu" ] || fail "$name: no bench/compat/$f.cu" ;;
    *) fail "$name: a command neither python3 nor {bin}: $cmd" ;;
    esac
    case $cmd in
    python3\ *) grep -q 'finish(\|print(f"RESULT ' "$ROOT/$f" || fail "$name: $f prints no RESULT line" ;;
    esac
done <"$P"
for f in "$ROOT"/bench/compat/*.py "$ROOT"/bench/overhead/*.py "$ROOT"/bench/workloads/llama_onebuf.py; do
    [ -f "$f" ] || continue
    "$PY" -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$f" 2>"$T/ast.err" ||
        fail "$f does not parse: $(cat "$T/ast.err")"
done
pass "$n programs listed, each present; every Python file parses"
