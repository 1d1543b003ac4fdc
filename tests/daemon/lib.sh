# tests/daemon/lib.sh - shared by the daemon's shell tests (tests/cli/daemon_*.sh); sourced.
#
# Each test gets a private directory with a private socket (MSCHED_SOCKET), so tests never see
# a user's daemon or each other. Every process a test starts is recorded and killed by the EXIT
# trap, whatever happens; every wait is bounded. The fake shim is built on first use into
# $BUILD/tests/fake_shim from tests/daemon/fake_shim.c and the project's libraries, with the
# same sanitizers as the build directory's name says (build-address-undefined -> ASan+UBSan).
#
# Environment: BUILD (build directory, default build), MSCHED (the msched binary, default
# $BUILD/bin/msched), CC (default cc).
set -u
BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
MSCHED=${MSCHED:-$BUILD/bin/msched}
MSCHEDD=${MSCHEDD:-$BUILD/bin/mschedd}
FAKE=$BUILD/tests/fake_shim
T=$(mktemp -d /tmp/msched-test.XXXXXX)
export MSCHED_SOCKET="$T/gpu0.sock"
unset MSCHED_SOCKET_DIR # a test that needs the socket directory names its own
export MSCHED_TEMPLATES=off # a user's template store must not change what these tests see
PIDS=()
TEST_USERS=()
TEST_GROUPS=()

cleanup() {
    local p u
    for p in "${PIDS[@]}"; do
        kill -9 "$p" 2>/dev/null
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null
        # not a child (a daemon started in the background): wait until it is gone
        for _ in $(seq 1 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    done
    for u in "${TEST_USERS[@]}"; do
        p=$(id -u "$u" 2>/dev/null) && rm -rf "/tmp/msched-$p"
        userdel "$u" >/dev/null 2>&1
    done
    for u in "${TEST_GROUPS[@]}"; do
        groupdel "$u" >/dev/null 2>&1
    done
    rm -rf "$T"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    if [ -f "$T/daemon.log" ]; then
        echo "--- daemon log (last 40 lines)"
        tail -n 40 "$T/daemon.log"
    fi
    for f in "$T"/*.out; do
        [ -f "$f" ] || continue
        echo "--- $(basename "$f")"
        tail -n 5 "$f"
    done
    echo "FAIL: $*" # again, last: a log shown by its tail (CI) must still say what failed
    exit 1
}

pass() {
    echo "ok: $*"
}

# Build the fake shim if it is missing or older than its source.
build_fake() {
    [ -x "$MSCHED" ] || fail "no msched at $MSCHED"
    [ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"
    "$MSCHED" help status >/dev/null 2>&1 ||
        fail "$MSCHED has no 'status' command (cli/cmd_status.c, cmd_top.c, cmd_config.c must be registered in cli/main.c)"
    if [ -x "$FAKE" ] && [ "$FAKE" -nt "$ROOT/tests/daemon/fake_shim.c" ] &&
        [ "$FAKE" -nt "$BUILD/lib/libmsipc.a" ] && [ "$FAKE" -nt "$BUILD/lib/libmscore.a" ]; then
        return 0
    fi
    local san=""
    case "$BUILD" in *address*) san="$san,address" ;; esac
    case "$BUILD" in *undefined*) san="$san,undefined" ;; esac
    case "$BUILD" in *thread*) san="$san,thread" ;; esac
    local flags=""
    [ -n "$san" ] && flags="-fsanitize=${san#,} -fno-omit-frame-pointer"
    mkdir -p "$BUILD/tests"
    # shellcheck disable=SC2086
    ${CC:-cc} -std=c11 -D_GNU_SOURCE -O1 -g $flags -I"$ROOT" "$ROOT/tests/daemon/fake_shim.c" \
        "$BUILD/lib/libmsipc.a" "$BUILD/lib/libmscore.a" -lm -o "$FAKE.tmp.$$" ||
        fail "cannot build the fake shim"
    mv -f "$FAKE.tmp.$$" "$FAKE"
}

# start_daemon [mschedd options...]: foreground, private socket, log in $T/daemon.log.
start_daemon() {
    "$MSCHEDD" --foreground --check --log-level info "$@" >>"$T/daemon.log" 2>&1 &
    DAEMON=$!
    PIDS+=("$DAEMON")
    local i
    for i in $(seq 1 100); do
        if "$MSCHED" status >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$DAEMON" 2>/dev/null || fail "the daemon exited at start"
        sleep 0.05
    done
    fail "the daemon did not come up"
}

# shim NAME [fake_shim options...]: start one in the background; its output in $T/NAME.out.
shim() {
    local name=$1
    shift
    "$FAKE" --name "$name" --log "$T/shims.log" "$@" >"$T/$name.out" 2>&1 &
    local p=$!
    PIDS+=("$p")
    eval "PID_$name=$p"
}

# wait_shim NAME EXPECTED_STATUS [seconds]: wait (bounded) and check its exit status.
wait_shim() {
    local name=$1 want=$2 secs=${3:-15}
    local p
    eval "p=\$PID_$name"
    local i
    for i in $(seq 1 $((secs * 20))); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$p" 2>/dev/null; then
        fail "shim $name still running after ${secs}s"
    fi
    wait "$p"
    local rc=$?
    [ "$rc" -eq "$want" ] || fail "shim $name exited with $rc, expected $want: $(cat "$T/$name.out")"
}

# client_done NAME SECONDS PATTERN: wait for the client NAME (bounded), which must exit 0, print
# a line matching PATTERN (grep's basic syntax) and have run under the daemon.
client_done() {
    wait_shim "$1" 0 "$2"
    grep -q "$3" "$T/$1.out" || fail "$1: $(grep -E 'ENGINE|FAIL|msched' "$T/$1.out" | tail -n 4)"
    grep -Eq "daemon: connected, [1-9][0-9]* slices" "$T/$1.out" ||
        fail "$1 did not run under the daemon: $(grep msched "$T/$1.out" | tail -n 3)"
}

# metric NAME: the value of an unlabelled-per-task metric from the Prometheus text.
metric() {
    "$MSCHED" status --prometheus | awk -v m="$1" '$1 ~ "^"m"[{]" { print $2; exit }'
}

# The daemon's log must not report a broken invariant, an error or a sanitizer finding; nor may
# the shims' outputs.
check_log_clean() {
    if grep -E "invariant violated| error: |Sanitizer|runtime error" "$T/daemon.log" >/dev/null; then
        fail "the daemon logged an error"
    fi
    if cat "$T"/*.out 2>/dev/null | grep -E "Sanitizer|runtime error" >/dev/null; then
        fail "a shim reported a sanitizer finding"
    fi
}

# Resident bytes never above the budget, from the daemon's own metrics.
check_budget() {
    local r b
    r=$(metric msched_resident_bytes)
    b=$(metric msched_budget_bytes)
    [ -n "$r" ] && [ -n "$b" ] || fail "no metrics"
    [ "$r" -le "$b" ] || fail "resident $r over budget $b"
}

# need_fake_cuda: sets SHIMDIR, FAKELIB and STRESS for a test that runs libmsched on the fake
# CUDA driver, or skips the test (exit 0) when they are not built (no CUDA headers).
need_fake_cuda() {
    SHIMDIR=$BUILD/lib/msched
    FAKELIB=$BUILD/lib/fakecuda/libcuda.so.1
    STRESS=$BUILD/tests/shim/engine_stress
    if [ ! -e "$SHIMDIR/libcuda.so.1" ] || [ ! -e "$FAKELIB" ] || [ ! -x "$STRESS" ]; then
        echo "SKIP: libmsched, the fake driver or engine_stress is not built (no CUDA headers?)"
        exit 0
    fi
}

# client NAME [VAR=VALUE...] -- ARGS...: one engine_stress under libmsched (SHIMDIR, FAKELIB and
# STRESS set, as need_fake_cuda does), in the background; its output in $T/NAME.out.
client() {
    local name=$1
    shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        envs+=("$1")
        shift
    done
    shift
    env LD_LIBRARY_PATH="$SHIMDIR" MSCHED_REAL_LIBCUDA="$FAKELIB" MS_FAKECUDA="$FAKELIB" \
        MSCHED_VERBOSE=1 "${envs[@]}" "$STRESS" "$@" >"$T/$name.out" 2>&1 &
    local p=$!
    PIDS+=("$p")
    eval "PID_$name=$p"
}

# fake_program_env: the lines a stand-in program's script starts with, so that it runs on the
# fake driver both under `msched run` (libmsched first on LD_LIBRARY_PATH) and without it.
fake_program_env() {
    cat <<EOF
#!/usr/bin/env bash
export MS_FAKECUDA=$FAKELIB MSCHED_REAL_LIBCUDA=$FAKELIB
case "\${LD_LIBRARY_PATH:-}" in
*msched*) ;;
*) export LD_LIBRARY_PATH=$BUILD/lib/fakecuda ;;
esac
EOF
}

# need_root WHAT: checks that create users and act as them (hostile local users, a service for
# several users) need root; without it the test says so and is skipped (CI runs as root).
need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: $1 needs root (it creates users with useradd); CI runs as root"
        exit 0
    fi
    command -v useradd >/dev/null && command -v setpriv >/dev/null ||
        fail "useradd or setpriv is missing"
}

# new_user VAR [useradd options...]: a throwaway user (no home, no shell), its name in $VAR;
# removed at exit with its /tmp/msched-UID.
new_user() {
    local var=$1 name="mst$$u${#TEST_USERS[@]}"
    shift
    useradd -M -s /usr/sbin/nologin "$@" "$name" >/dev/null || fail "useradd $name failed"
    TEST_USERS+=("$name")
    eval "$var=$name"
}

# new_group VAR: a throwaway group, its name in $VAR; removed at exit.
new_group() {
    local var=$1 name="mst$$g${#TEST_GROUPS[@]}"
    groupadd "$name" >/dev/null || fail "groupadd $name failed"
    TEST_GROUPS+=("$name")
    eval "$var=$name"
}

# as_user NAME CMD...: run CMD as user NAME with its groups, in this environment.
as_user() {
    local u=$1
    shift
    setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- "$@"
}

# as_user_bg NAME CMD... &: the same for a background job: it replaces the job's subshell, so
# $! is CMD's own pid (for PIDS, kill and `msched status`). Never call it in the foreground.
as_user_bg() {
    local u=$1
    shift
    exec setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- "$@"
}
