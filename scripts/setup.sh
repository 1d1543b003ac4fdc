#!/usr/bin/env bash
# scripts/setup.sh - installs what msched needs to build and test on Debian/Ubuntu.
#   libcmocka-dev   the unit-test framework (tests/unit)
#   clang           libFuzzer builds of the fuzz targets (`make fuzz`)
#   clang-format    the C style check (`make check-format`, run by CI)
#   libncurses-dev  the `msched top` screen
#   python3         the shim's code generator (scripts/gen_shim.py)
#   python3-matplotlib  the evaluation page's plots (bench/paper/make_page.py)
#   python3-jsonschema  validates `msched status --json` against docs/status.schema.json (tests)
#   curl            scrapes mschedd's HTTP metrics endpoint in the tests (daemon_metrics_http)
#   python3-venv    the venv of the PyPI test tools (below)
#   valgrind        counts libmsched's instructions per launch (bench/shim/launch_instr_fake.sh)
# Then the PyPI packages of scripts/requirements-test.txt go into the venv build/venv (made
# again when missing or when the requirements changed): kubernetes-validate, which checks
# deploy/kubernetes/ against the Kubernetes schemas it bundles (tests/cli/deploy_kubernetes.sh).
# The CUDA toolkit (nvcc, cuda.h) is expected at /usr/local/cuda for the shim; without it the
# shim and its tests are skipped. Needs root (or sudo) for apt-get; does nothing if all is there.
set -eu
pkgs="libcmocka-dev clang clang-format libncurses-dev python3 python3-matplotlib python3-jsonschema python3-venv curl valgrind make gcc"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
else
    echo "setup: all packages present"
fi

# The PyPI test tools, in a venv the project owns (`make clean` removes it with build/).
cd "$(dirname "$0")/.."
venv=build/venv
req=scripts/requirements-test.txt
if [ -x "$venv/bin/python3" ] && cmp -s "$req" "$venv/requirements-test.txt"; then
    echo "setup: $venv up to date"
else
    echo "setup: installing $req into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$venv/requirements-test.txt"
fi
