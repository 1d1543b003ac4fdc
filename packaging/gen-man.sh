#!/usr/bin/env bash
# packaging/gen-man.sh - writes the man pages msched.1 and mschedd.1 from the programs' own help
# text, so the pages never disagree with `--help`.
#
#   packaging/gen-man.sh BINDIR OUTDIR
#
# msched.1: the command list (`msched help`), then one section per command with its full usage
# (`msched help CMD`). mschedd.1: `mschedd --help`, then the option table (`mschedd
# --help-options`). The help text is kept verbatim in no-fill blocks (its columns are aligned by
# spaces); only what roff would misread is escaped: backslashes, and a '.' or "'" that starts a
# line. The date is the programs' version, not today's, so the output is reproducible.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 BINDIR OUTDIR" >&2
    exit 2
fi
bindir=$1
out=$2
msched=$bindir/msched
mschedd=$bindir/mschedd
mkdir -p "$out"

# Help text as a roff no-fill block.
verbatim() {
    echo ".nf"
    sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g'
    echo ".fi"
}

version=$("$msched" --version | awk '{print $2}')

{
    echo ".TH MSCHED 1 \"\" \"msched $version\" \"User Commands\""
    echo ".SH NAME"
    echo "msched \\- run CUDA programs that together need more GPU memory than the GPU has"
    echo ".SH SYNOPSIS"
    echo ".B msched"
    echo ".I command"
    echo "[\\fIoptions\\fR]"
    echo ".SH DESCRIPTION"
    echo "msched lets several unmodified CUDA programs share one NVIDIA GPU when together they"
    echo "need more GPU memory than it has: a CUDA driver shim (libmsched) virtualizes each"
    echo "program's device memory and a per-GPU daemon (mschedd) time-slices the GPU and moves"
    echo "each task's predicted working set in bulk at every switch."
    echo ".PP"
    "$msched" help | verbatim
    cmds=$("$msched" help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ && $1 != "help" {print $1}')
    echo ".SH COMMANDS"
    for c in $cmds; do
        echo ".SS $c"
        "$msched" help "$c" | verbatim
    done
    echo ".SH EXIT STATUS"
    echo "0 on success, 1 when the work failed, 2 for a bad command line."
    echo ".SH SEE ALSO"
    echo ".BR mschedd (1)"
} >"$out/msched.1"

{
    echo ".TH MSCHEDD 1 \"\" \"msched $version\" \"User Commands\""
    echo ".SH NAME"
    echo "mschedd \\- the msched daemon of one GPU"
    echo ".SH SYNOPSIS"
    echo ".B mschedd"
    echo "[\\fIoptions\\fR]"
    echo ".SH DESCRIPTION"
    "$mschedd" --help | verbatim
    echo ".SH OPTIONS TABLE"
    echo "Every option, its default and whether it can change while the daemon runs"
    echo "(\\fBmsched config set\\fR):"
    echo ".PP"
    "$mschedd" --help-options | verbatim
    echo ".SH SEE ALSO"
    echo ".BR msched (1)"
} >"$out/mschedd.1"
