"""Serves a disco job to remote controllers, with Python worker functions on every rank.

    mpirun -n 4 python3 -m disco.serve --module mymod --port 7070 [disco-serve's flags]

Every rank imports each --module first (so its ``@disco.register_func`` functions exist on every
worker) and loads each --load library; then rank 0 serves the session as ``disco-serve`` does
(``disco.connect`` or ``disco-remote`` attach to it) until a client ends the job.
"""

import argparse
import importlib
import os
import sys
import threading

from . import _core, main


def _parser():
    p = argparse.ArgumentParser(prog="python3 -m disco.serve", description=__doc__.split("\n")[0])
    p.add_argument("--module", action="append", default=[], metavar="NAME",
                   help="import this Python module on every rank first (repeatable)")
    p.add_argument("--load", action="append", default=[], metavar="LIB.so",
                   help="load a library of C++ worker functions on every worker (repeatable)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=int, default=0,
                   help="TCP port (default 0: any free port, printed and written to --port-file)")
    p.add_argument("--key", default="",
                   help="key clients must present, 16 characters or more (default: "
                        "DISCO_SERVE_KEY, else a generated key written to --key-file)")
    p.add_argument("--key-file", default="", help="where a generated key goes")
    p.add_argument("--port-file", default="", help="write the port here once listening")
    p.add_argument("--idle-timeout", type=int, default=3600,
                   help="drop a client silent this many seconds between requests (0: never)")
    p.add_argument("--request-timeout-ms", type=int, default=60000,
                   help="drop a client whose begun request, answer or copy moves no byte for "
                        "this long (plus a second per MiB still to move)")
    p.add_argument("--max-packet-bytes", type=int, default=64 << 20,
                   help="largest request packet accepted")
    p.add_argument("--max-clients", type=int, default=0,
                   help="stop after this many clients (default 0: until a client ends the job)")
    p.add_argument("--end-with-stdin", action="store_true",
                   help="end the job when rank 0's standard input closes before the server "
                        "has stopped (disco.ProcessSession: its process is gone)")
    return p


def _end_with_stdin(done):
    """Rank 0: waits for the end of standard input (the launcher forwards it from the process
    that started the job); if the server is still running then, that process is gone (killed
    before it attached, or it left without detaching), and the job ends."""
    try:  # the descriptor itself: sys.stdin's buffer lock would stop the interpreter's exit
        while os.read(0, 65536):
            pass
    except OSError:
        pass
    if done.is_set():
        return
    sys.stderr.write("disco.serve: the process that started this job is gone (its end of rank "
                     "0's standard input closed): ending the job\n")
    _core._abort_job(1)


def run(argv=None):
    """Runs ``python3 -m disco.serve`` with the command line `argv` (None: sys.argv[1:]) on every
    rank; returns the job's exit code (the code of the client that ended it)."""
    args = _parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        sys.exit("disco.serve: --port: %d is not a valid port" % args.port)
    for name in args.module:
        importlib.import_module(name)
    opts = _core.ServeOptions()
    opts.host, opts.port, opts.key = args.host, args.port, args.key
    opts.key_file, opts.port_file = args.key_file, args.port_file
    opts.idle_timeout_s, opts.request_timeout_ms = args.idle_timeout, args.request_timeout_ms
    opts.max_packet_bytes, opts.max_clients = args.max_packet_bytes, args.max_clients
    # A server's log is its clients coming and going: info unless the user says otherwise.
    os.environ.setdefault("DISCO_LOG_LEVEL", "info")

    done = threading.Event()

    def controller(sess):
        if args.end_with_stdin:
            threading.Thread(target=_end_with_stdin, args=(done,), name="disco-stdin",
                             daemon=True).start()
        if args.load:
            load = sess.get_global_func("disco.load_library")
            for lib in args.load:
                load(lib)
            sess.sync_all()  # a library that fails to load ends the job here, naming it
        try:
            return _core.serve(sess, opts)
        finally:
            done.set()

    return main(controller, [sys.argv[0]])


if __name__ == "__main__":
    sys.exit(run())
