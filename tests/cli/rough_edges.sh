#!/usr/bin/env bash
# tests/cli/rough_edges.sh - the CLI behaves where it used to surprise:
#
#   sim partial   one pressure point that cannot fit (micro at 10000 % of 1 GiB; a trace at
#                 800 %) does not stop the others: their tables are printed, the JSON and SVG
#                 are written with every point (the failed one with "error"), one error line
#                 names the failed point, exit 1
#   json -        `sim --json -` writes the JSON to stdout (parseable, the table on stderr) and
#                 no file named "-"
#   random        `--workload random` reaches the pressure asked for (within 5 %)
#   demo          in a directory that cannot be written, `msched demo` prints its table, says
#                 the plot was skipped and exits 0
#   help          status, top and config help name --gpu and --socket
#   docs          every `msched WORD` in README.md, docs/*.md and the help texts names a command
#                 msched has, and docs/architecture.md lists exactly msched's commands
#   options       --name=value and --name value both work (getopt_long), options after operands
# Run by tests/run.sh with MSCHED=path/to/msched.
set -u
MSCHED=${MSCHED:-build/bin/msched}
case $MSCHED in /*) ;; *) MSCHED=$PWD/$MSCHED ;; esac
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=python3
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() {
    pass=$((pass + 1))
    echo "ok   $*"
}
bad() {
    fail=$((fail + 1))
    echo "FAIL $*"
}
# jq-like: a Python expression over the JSON document d in FILE.
jsonq() {
    "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@" 2>&1
}

# ---- sim: a failing point does not cost the others -------------------------------------------
"$MSCHED" sim --workload micro --budget 1GiB --pressure 1.5,100 --slices 2 \
    --json "$tmp/p.json" --svg "$tmp/p.svg" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "pressure 10000%" "$tmp/err" &&
    grep -q "^  opt " "$tmp/out" && grep -q "FAILED" "$tmp/out" &&
    [ "$(jsonq "$tmp/p.json" 'len(d["points"])')" = 2 ] &&
    [ "$(jsonq "$tmp/p.json" '"opt" in d["points"][0]["policies"] and "error" not in d["points"][0]')" = True ] &&
    [ "$(jsonq "$tmp/p.json" '"touches" in d["points"][1]["error"]')" = True ] &&
    grep -q "failed" "$tmp/p.svg"; then
    ok "sim: the 150 % point's results are written when the 10000 % point fails"
else
    bad "sim partial: exit $rc, stderr '$(cat "$tmp/err")', json $(head -c 300 "$tmp/p.json" 2>&1)"
fi
printf 'msched-trace 1\nalloc 1 0x7f0000000000 1073741824 device\n%s\n' \
    'kernel 1 0 1000 grid=1,1,1 block=1,1,1 name=k params=00000000007f0000' >"$tmp/big.trace"
"$MSCHED" sim --trace "$tmp/big.trace" --pressure 1,8 --slices 2 --json "$tmp/t.json" \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q "point 2 of 2 (pressure 800%)" "$tmp/err" &&
    [ "$(jsonq "$tmp/t.json" '[("error" in p) for p in d["points"]]')" = "[False, True]" ]; then
    ok "sim --trace: the 100 % point is written when the 800 % point fails"
else
    bad "sim --trace partial: exit $rc, stderr '$(cat "$tmp/err")'"
fi

# ---- sim --json - ----------------------------------------------------------------------------
mkdir "$tmp/cwd"
(cd "$tmp/cwd" && "$MSCHED" sim --workload micro --budget 1GiB --pressure 1.5 --slices 2 \
    --policies opt --json - >"$tmp/stdout.json" 2>"$tmp/err")
rc=$?
if [ "$rc" -eq 0 ] && [ ! -e "$tmp/cwd/-" ] &&
    [ "$(jsonq "$tmp/stdout.json" 'd["format"]')" = msched-sim-1 ] && grep -q "^  opt " "$tmp/err"; then
    ok "sim --json - writes the JSON to stdout, the table to stderr"
else
    bad "sim --json -: exit $rc, files $(ls "$tmp/cwd"), stdout $(head -c 200 "$tmp/stdout.json")"
fi

# ---- random honors --pressure ------------------------------------------------------------------
"$MSCHED" sim --workload random --pressure 1.5,3 --slices 2 --policies opt --json "$tmp/r.json" \
    >/dev/null 2>"$tmp/err"
got=$(jsonq "$tmp/r.json" '[round(p["actual_pressure"], 2) for p in d["points"]]')
if [ "$(jsonq "$tmp/r.json" 'all(abs(p["actual_pressure"] / p["pressure"] - 1) < 0.05 for p in d["points"])')" = True ]; then
    ok "random reaches the pressure asked for: $got"
else
    bad "random at 1.5 and 3: reached $got ($(cat "$tmp/err"))"
fi

# ---- demo where it cannot write ----------------------------------------------------------------
# A removed working directory stops anyone (root included) from creating a file in it; a
# directory without write permission stops everyone but root.
demo_in() {
    local what=$1
    "$MSCHED" demo >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -eq 0 ] && grep -q "^  opt " "$tmp/out" && grep -q "plot: not written" "$tmp/out" &&
        [ ! -s "$tmp/err" ]; then
        ok "demo in $what: the table, a note about the plot, exit 0"
    else
        bad "demo in $what: exit $rc, stderr '$(cat "$tmp/err")'"
    fi
}
mkdir "$tmp/gone"
(cd "$tmp/gone" && rmdir "$tmp/gone" && demo_in "a removed directory")
if [ "$(id -u)" -ne 0 ]; then
    mkdir "$tmp/ro" && chmod a-w "$tmp/ro"
    (cd "$tmp/ro" && demo_in "a read-only directory")
fi

# ---- help names --gpu and --socket -----------------------------------------------------------
for c in status top config; do
    h=$("$MSCHED" help "$c")
    if grep -q -- "--gpu N" <<<"$h" && grep -q -- "--socket PATH" <<<"$h" &&
        [ "$(grep -c -- "  --gpu\|  --socket" <<<"$h")" -ge 2 ]; then
        ok "$c help describes --gpu and --socket"
    else
        bad "$c help lacks --gpu or --socket"
    fi
done

# ---- docs name only commands that exist ------------------------------------------------------
cmds=$("$MSCHED" help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}' | tr '\n' ' ')
for c in run status top config sim demo; do
    "$MSCHED" help "$c"
done >"$tmp/help.txt"
"$PY" - "$ROOT" "$tmp/help.txt" $cmds <<'EOF' >"$tmp/docs.out" 2>&1
import glob, os, re, sys
root, helptxt = sys.argv[1], sys.argv[2]
cmds = set(sys.argv[3:]) - {"help"}  # the commands; `msched help` may be named too
words = cmds | {"help"}
bad = []
# In markdown: code spans and fenced blocks; in help text: everything.
for path in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
    text = open(path).read()
    fenced = re.findall(r"```.*?```", text, re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    for chunk in fenced + spans:
        for m in re.finditer(r"(?:^|[\s/])msched ([a-z][a-z-]*)", chunk, re.M):
            if m.group(1) not in words:
                bad.append("%s: msched %s" % (os.path.basename(path), m.group(1)))
for m in re.finditer(r"msched ([a-z][a-z-]*)", open(helptxt).read()):
    if m.group(1) not in words:
        bad.append("help: msched %s" % m.group(1))
# docs/architecture.md's row for the CLI lists its commands.
arch = open(os.path.join(root, "docs", "architecture.md")).read()
row = [l for l in arch.splitlines() if l.startswith("| `msched` (the CLI)")]
listed = set(re.findall(r"`([a-z]+)`", row[0].split("|")[2])) if row else set()
if listed != cmds:
    bad.append("architecture.md lists %s, msched has %s" % (sorted(listed), sorted(cmds)))
print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF
if [ $? -eq 0 ]; then
    ok "README, docs and help name only msched's commands ($cmds)"
else
    bad "commands that do not exist: $(cat "$tmp/docs.out")"
fi

# ---- getopt_long conventions ------------------------------------------------------------------
if "$MSCHED" sim --workload=micro --budget=1GiB --pressure=1.5 --slices=2 --policies=opt \
    --json="$tmp/eq.json" >/dev/null 2>&1 && [ -s "$tmp/eq.json" ]; then
    ok "sim --name=value"
else
    bad "sim --name=value"
fi
"$MSCHED" config get --socket "$tmp/none.sock" 2>"$tmp/err" >/dev/null
if grep -q "no daemon is running on $tmp/none.sock" "$tmp/err"; then
    ok "config: an option after the operand"
else
    bad "config get --socket: $(cat "$tmp/err")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
