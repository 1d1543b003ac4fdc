#!/usr/bin/env python3
"""sd_helper.py - a stand-in for systemd's side of mschedd.socket and Type=notify, for tests.

    sd_helper.py --listen SOCK --notify NSOCK --log FILE [--starts N] -- COMMAND...

Binds and listens on the Unix stream socket SOCK and binds the datagram socket NSOCK. When a
client connects and no COMMAND runs, it starts COMMAND as systemd would start a
socket-activated service: the listening socket as fd 3, LISTEN_FDS=1 and LISTEN_PID set to the
command's pid, NOTIFY_SOCKET=NSOCK. Every notification datagram is logged, as are the starts
and exits, one line each, flushed at once:
    started PID
    notify PID: READY=1|STATUS=...      (the datagram's newlines as '|')
    exited PID STATUS
After N starts (default 1) have exited it exits. SIGTERM stops the command and the helper.
"""
import os
import select
import signal
import socket
import sys


def main():
    args = sys.argv[1:]
    cmd = args[args.index("--") + 1:]
    opts = dict(zip(args[:args.index("--"):2], args[1:args.index("--"):2]))
    starts_max = int(opts.get("--starts", "1"))
    log = open(opts["--log"], "a", buffering=1)
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(opts["--listen"])
    ls.listen(64)
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(opts["--notify"])
    child = None
    starts = 0

    def stop(signo, frame):
        if child:
            os.kill(child, signal.SIGTERM)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        watch = [ns] + ([ls] if child is None and starts < starts_max else [])
        ready, _, _ = select.select(watch, [], [], 0.05)
        if ns in ready:
            msg = ns.recv(65536).decode(errors="replace").replace("\n", "|")
            log.write("notify %s: %s\n" % (child, msg))
        if ls in ready and child is None:
            pid = os.fork()
            if pid == 0:
                os.dup2(ls.fileno(), 3)
                env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()),
                           NOTIFY_SOCKET=opts["--notify"])
                os.execvpe(cmd[0], cmd, env)
            child = pid
            starts += 1
            log.write("started %d\n" % pid)
        if child:
            pid, status = os.waitpid(child, os.WNOHANG)
            if pid:
                # notifications sent just before the exit
                while select.select([ns], [], [], 0)[0]:
                    msg = ns.recv(65536).decode(errors="replace").replace("\n", "|")
                    log.write("notify %s: %s\n" % (child, msg))
                log.write("exited %d %d\n" % (pid, os.waitstatus_to_exitcode(status)))
                child = None
                if starts >= starts_max:
                    return 0


if __name__ == "__main__":
    sys.exit(main())
