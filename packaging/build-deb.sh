#!/usr/bin/env bash
# packaging/build-deb.sh - builds the Debian package msched_<version>_<arch>.deb with dpkg-deb.
#
#   packaging/build-deb.sh [OUTDIR]        (`make package` runs it; default OUTDIR $BUILD/deb)
#
# What goes in is exactly `make install DESTDIR=<stage> PREFIX=/usr`: /usr/bin/msched and mschedd,
# libmsched in /usr/lib/msched/ (off the default library path: only `msched run` puts it in front
# of a program's CUDA driver), the man pages (gzipped, as Debian keeps them), bash completion,
# the systemd units in /usr/lib/systemd/system with /etc/msched/msched.conf as a conffile
# (maintainer scripts reload systemd's view of the units and stop them on removal; nothing is
# enabled: `systemctl enable --now mschedd.socket` does that), and
# /usr/share/doc/msched/copyright made from the LICENSE. The version is the one `msched
# --version` prints; Depends lists the Debian packages that own the shared libraries the
# programs are linked with (readelf's NEEDED entries, found with ldconfig and dpkg -S), so the
# package needs no debian/ directory and no dpkg-dev. Environment: BUILD (default build) and
# SANITIZE (passed to make; a package is meant from a plain build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${1:-$BUILD/deb}
SANITIZE=${SANITIZE:-}

for tool in dpkg-deb dpkg readelf ldconfig; do
    command -v "$tool" >/dev/null || {
        echo "build-deb: $tool is missing (a Debian system has dpkg; readelf is in binutils)" >&2
        exit 1
    }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory SANITIZE="$SANITIZE" \
    install DESTDIR="$root" PREFIX=/usr >"$stage/make.log" 2>&1 || {
    tail -n 20 "$stage/make.log" >&2
    echo "build-deb: make install failed" >&2
    exit 1
}
[ -e "$root/usr/lib/msched/libcuda.so.1" ] || {
    echo "build-deb: libmsched was not built (no CUDA headers?); the package would not run programs" >&2
    exit 1
}

version=$("$root/usr/bin/msched" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)

# Debian's layout: compressed man pages, the licence as doc/<package>/copyright.
gzip -9n "$root"/usr/share/man/man1/*.1
doc=$root/usr/share/doc/msched
{
    echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    echo "Upstream-Name: msched"
    echo
    echo "Files: *"
    echo "Copyright: the msched authors"
    echo "License: MIT"
    sed -e 's/^$/./' -e 's/^/ /' LICENSE
} >"$doc/copyright"
rm -f "$doc/LICENSE"

# Depends: the packages owning the libraries the ELF files need, less those the package ships.
deps=$(
    find "$root" -type f | while read -r f; do
        readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
    done | sort -u | while read -r lib; do
        [ -e "$root/usr/lib/msched/$lib" ] && continue
        path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64|64bit|AArch64/ {print $NF; exit}')
        [ -n "$path" ] || path=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
        [ -n "$path" ] || { echo "build-deb: cannot find $lib" >&2; exit 1; }
        dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -n 1 | cut -d: -f1 ||
            dpkg -S "$path" | head -n 1 | cut -d: -f1
    done | sort -u | paste -sd, - | sed 's/,/, /g'
)
[ -n "$deps" ] || { echo "build-deb: no dependencies found" >&2; exit 1; }

mkdir -p "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: msched
Version: $version
Architecture: $arch
Maintainer: the msched authors <msched@invalid>
Installed-Size: $size
Depends: $deps
Section: utils
Priority: optional
Description: share one NVIDIA GPU between CUDA programs that need more memory than it has
 msched runs unmodified CUDA programs with a CUDA driver shim (libmsched) in front of the
 driver and time-slices them with a per-GPU daemon (mschedd), which predicts each task's
 working set and moves it in bulk at every context switch. The CLI (msched) runs programs,
 shows and changes the daemon's state, and simulates the memory policies without a GPU
 (msched demo, msched sim).
EOF
(cd "$root" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | sort -z |
    xargs -0 md5sum) >"$root/DEBIAN/md5sums"
[ -f "$root/etc/msched/msched.conf" ] || {
    echo "build-deb: make install wrote no /etc/msched/msched.conf" >&2
    exit 1
}
echo /etc/msched/msched.conf >"$root/DEBIAN/conffiles"
# systemd sees new or removed units at once; a running daemon is stopped before its files go.
cat >"$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null || true; fi
EOF
cat >"$root/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    systemctl stop mschedd.socket mschedd.service >/dev/null 2>&1 || true
fi
EOF
cat >"$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null || true; fi
if [ "$1" = purge ]; then rmdir /etc/msched 2>/dev/null || true; fi
EOF
chmod 755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

mkdir -p "$OUT"
deb=$OUT/msched_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
