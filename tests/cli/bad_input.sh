#!/usr/bin/env bash
# tests/cli/bad_input.sh - every kind of bad input to the msched CLI gets a clean refusal:
# a non-zero exit status below 128 (no signal, no crash), exactly one line on stderr, starting
# with "msched: ", and no sanitizer report. Run by tests/run.sh with MSCHED=path/to/msched.
set -u
MSCHED=${MSCHED:-build/bin/msched}
if [ ! -x "$MSCHED" ]; then
    echo "bad_input.sh: $MSCHED is not an executable (set MSCHED)" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

printf 'msched-trace 1\ntask 1 prio=0 name=x\nalloc 1 0x1000 zero device\n' >"$tmp/malformed.trace"
printf 'msched-trace 7\n' >"$tmp/version.trace"
: >"$tmp/empty.trace"
printf 'msched-trace 1\ntask 1 prio=0 name=idle\n' >"$tmp/idle.trace"
printf 'msched-trace 1\nalloc 1 0x7f0000000000 1073741824 device\n%s\n' \
    'kernel 1 0 1000 grid=1,1,1 block=1,1,1 name=k params=00000000007f0000' >"$tmp/big.trace"
head -c 3000 /dev/urandom >"$tmp/binary.trace"

# expect STATUS ARGS...: STATUS is 1 (runtime) or 2 (usage)
expect() {
    local want=$1
    shift
    "$MSCHED" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    local lines
    lines=$(wc -l <"$tmp/err")
    local why=""
    if [ "$rc" -ne "$want" ]; then
        why="exit status $rc, wanted $want"
    elif [ "$lines" -ne 1 ]; then
        why="$lines lines on stderr, wanted 1"
    elif ! head -n 1 "$tmp/err" | grep -q '^msched: '; then
        why="stderr does not start with 'msched: '"
    elif grep -qi 'sanitizer\|runtime error' "$tmp/err"; then
        why="sanitizer report"
    fi
    if [ -n "$why" ]; then
        fail=$((fail + 1))
        echo "FAIL msched $*: $why"
        sed 's/^/    stderr: /' "$tmp/err" | head -n 5
    else
        pass=$((pass + 1))
        echo "ok   msched $* -> $(cat "$tmp/err")"
    fi
}

# mschedd: an unknown option is named as unknown, even without a value after it.
MSCHEDD=${MSCHEDD:-$(dirname "$MSCHED")/mschedd}
if [ -x "$MSCHEDD" ]; then
    for args in "--bogus" "--bogus 1" "--bogus=1"; do
        # shellcheck disable=SC2086
        "$MSCHEDD" $args >"$tmp/out" 2>"$tmp/err"
        rc=$?
        if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
            grep -q "^mschedd: unknown option '--bogus'" "$tmp/err"; then
            pass=$((pass + 1))
            echo "ok   mschedd $args -> $(cat "$tmp/err")"
        else
            fail=$((fail + 1))
            echo "FAIL mschedd $args: exit $rc, $(head -n 2 "$tmp/err" | tr '\n' ' ')"
        fi
    done
fi

expect 2
expect 2 nosuchcommand
expect 2 help nosuchcommand
expect 2 sim --bogus
expect 2 sim extra-argument
expect 2 sim --workload
expect 2 sim --workload nosuch
expect 2 sim --workload=E
expect 2 sim --pressure abc
expect 2 sim --slice-max
expect 2 sim --slice-max 0
expect 2 sim --slice-max soon
expect 2 sim --switch-frac 0
expect 2 sim --switch-frac 101
expect 2 sim --switch-frac x
expect 2 sim --pressure 0
expect 2 sim --pressure -1
expect 2 sim --pressure 1,,2
expect 2 sim --pressure 1.5x
expect 2 sim --pressure 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
expect 2 sim --pressure 500
expect 2 sim --budget 12XB
expect 2 sim --budget 0
expect 2 sim --budget -4GiB
expect 2 sim --budget 99999999999TiB
expect 2 sim --budget nan
expect 2 sim --slice 10
expect 2 sim --slice -5ms
expect 2 sim --slice 0ms
expect 2 sim --slice 1e3ms
expect 2 sim --duration abc
expect 2 sim --duration inf
expect 2 sim --slices 0
expect 2 sim --slices 12x
expect 2 sim --seed -1
expect 2 sim --seed 99999999999999999999999
expect 2 sim --horizon 0
expect 2 sim --policies foo
expect 2 sim --policies opt,,lru
expect 2 sim --policies ""
expect 2 sim --profile nosuch
expect 2 sim --hash-clean maybe
expect 2 sim --workload D --trace "$tmp/big.trace"
expect 2 sim --trace "$tmp/big.trace"
expect 2 sim --trace "$tmp/big.trace" --budget 2GiB --pressure 2
expect 2 sim --trace
expect 1 sim --trace "$tmp/does-not-exist.trace" --budget 1GiB
expect 1 sim --trace "$tmp" --budget 1GiB
expect 1 sim --trace "$tmp/malformed.trace" --budget 1GiB
expect 1 sim --trace "$tmp/version.trace" --budget 1GiB
expect 1 sim --trace "$tmp/empty.trace" --budget 1GiB
expect 1 sim --trace "$tmp/idle.trace" --budget 1GiB
expect 1 sim --trace "$tmp/binary.trace" --budget 1GiB
expect 1 sim --trace "$tmp/big.trace" --budget 100MiB --slices 2
expect 1 sim --workload D --budget 4GiB --pressure 2 --slices 2
expect 1 sim --templates "$tmp/does-not-exist.store" --slices 1
expect 1 sim --templates "$tmp/malformed.trace" --slices 1
expect 2 sim --templates
expect 2 run --templates "$tmp/does-not-exist.store" -- true
expect 2 profile --evaluate
expect 2 profile --evaluate "$tmp/malformed.trace" -- true
expect 1 profile --evaluate "$tmp/does-not-exist.prof" --out "$tmp/malformed.trace"
expect 1 profile --show "$tmp/does-not-exist.store"
expect 2 profile --show "$tmp/a" "$tmp/b"
expect 1 sim --workload micro --budget 1GiB --pressure 1.5 --slices 2 --svg "$tmp/no/such/dir/x.svg"
expect 1 sim --workload micro --budget 1GiB --pressure 1.5 --slices 2 --json "$tmp/no/such/dir/x.json"
expect 1 sim --workload D --dump-trace "$tmp/no/such/dir/d.trace"
expect 2 demo --bogus
expect 2 demo extra
expect 1 demo --svg "$tmp/no/such/dir/demo.svg"
expect 2 run
expect 2 run --bogus -- true
expect 2 run --priority 11 -- true
expect 2 run --priority high -- true
expect 2 run --weight 1001 -- true
expect 2 run --weight -1 -- true
expect 2 run --budget 1MiB -- true
expect 2 run --budget 16XB -- true
expect 2 run --engine nosuch -- true

# every command's --help and -h: usage on stdout, status 0, nothing on stderr
for cmd in run status top config sim demo; do
    for h in --help -h; do
        "$MSCHED" "$cmd" "$h" >"$tmp/out" 2>"$tmp/err"
        rc=$?
        if [ "$rc" -ne 0 ] || ! grep -q "usage: msched $cmd" "$tmp/out" || [ -s "$tmp/err" ]; then
            fail=$((fail + 1))
            echo "FAIL msched $cmd $h: exit $rc, stdout '$(head -n 1 "$tmp/out")', stderr '$(head -n 1 "$tmp/err")'"
        else
            pass=$((pass + 1))
        fi
    done
done

# the malformed trace names its line
"$MSCHED" sim --trace "$tmp/malformed.trace" --budget 1GiB 2>"$tmp/err" >/dev/null
if ! grep -q 'line 3' "$tmp/err"; then
    fail=$((fail + 1))
    echo "FAIL the malformed trace's error does not name line 3: $(cat "$tmp/err")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
