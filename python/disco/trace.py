"""A disco timeline (DISCO_TRACE) in the terminal, and as a PNG.

    python3 -m disco.trace TRACE.json [--png OUT.png] [--top N] [--check] [--max-mib N]

TRACE.json is what a job with DISCO_TRACE=TRACE.json wrote at its end, or, for a job that failed
or hung, the files TRACE.json.rank<r>.json its ranks left (given as TRACE.json, or each by name:
they are merged; their clocks are each rank's own, not aligned). Rank files found beside
TRACE.json are read only when they are regular files of yours (not links; others are skipped with
a note); every file is read without blocking (a FIFO is refused) and only up to --max-mib, and a
note names each file read and whose it is. It prints, per rank, the shares
of the trace's window spent running commands (compute), in collectives (moving data and waiting
in their agreement rounds for the slowest rank) and idle (waiting for the next command); the
slowest collectives; the functions that took the most time; and the controller's commands and
syncs. --png draws the timeline with gnuplot (Debian's gnuplot-nox): a row per rank and track, a
colour per kind. --check validates the file's structure (what Perfetto and chrome://tracing
need) and exits 1 naming the first bad event. The file opens unmodified in ui.perfetto.dev or
chrome://tracing.
"""

import argparse
import errno
import glob
import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections import defaultdict

KINDS = ("command", "run", "collective", "hdf5_read", "hdf5_write", "sync", "replay", "remote")


class TraceError(ValueError):
    pass


# The largest file read (--max-mib); the runtime's default ring (DISCO_TRACE_EVENTS) writes tens
# of MiB per rank.
DEFAULT_MAX_MIB = 1024
# disco writes integers and finite floats of int64's range; anything else is not its trace (and
# would make the summary's arithmetic inf, nan or an OverflowError).
_NUMBER_LIMIT = 2 ** 63


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _parse_int(text):
    if len(text.lstrip("-")) > 19 or not -_NUMBER_LIMIT <= int(text) < _NUMBER_LIMIT:
        raise ValueError(f"the integer {text[:30]}{'...' if len(text) > 30 else ''} is out of "
                         "range (disco writes numbers below 2^63)")
    return int(text)


def _parse_float(text):
    value = float(text)
    if not math.isfinite(value) or abs(value) >= _NUMBER_LIMIT:
        raise ValueError(f"the number {text[:30]}{'...' if len(text) > 30 else ''} is out of "
                         "range (disco writes finite numbers below 2^63)")
    return value


def _whose(uid):
    return "yours" if uid == os.getuid() else f"uid {uid}'s, not yours"


def _not_a_rank_file_of_yours(st):
    """Why a rank file found beside the trace is not read ("" when it is read)."""
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, not a file of yours"
    return ""


def _read(path, max_bytes, found):
    """The bytes of `path` and its owner's uid: a regular file (opened without blocking, so that a
    FIFO is refused, not waited on), at most max_bytes. A rank file `found` beside a trace (not
    named by the user) is opened without following a link and must be this uid's."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if found:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as e:
        why = "a symbolic link" if found and e.errno == errno.ELOOP else e.strerror
        raise TraceError(f"{path}: cannot open it: {why}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        why = _not_a_rank_file_of_yours(st) if found else (
            "" if stat.S_ISREG(st.st_mode) else "not a regular file")
        if why:
            raise TraceError(f"{path}: {why}")
        if st.st_size > max_bytes:
            raise TraceError(f"{path}: {st.st_size} bytes, more than --max-mib "
                             f"{max_bytes >> 20} MiB")
        try:
            data = f.read(max_bytes + 1)
        except OSError as e:
            raise TraceError(f"{path}: cannot read it: {e.strerror}") from None
        if len(data) > max_bytes:
            raise TraceError(f"{path}: more than --max-mib {max_bytes >> 20} MiB")
    return data, st.st_uid


def _load_one(path, max_bytes, found, notes):
    raw, uid = _read(path, max_bytes, found)
    notes.append(f"read {path} ({len(raw)} bytes, {_whose(uid)})")
    try:
        data = json.loads(raw, parse_constant=_no_constant,  # NaN and Infinity are not JSON
                          parse_int=_parse_int, parse_float=_parse_float)
    except (ValueError, RecursionError) as e:
        raise TraceError(f"{path}: not a trace-event JSON file: {e}") from None
    if isinstance(data, list):  # the JSON Array Format
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path}: no 'traceEvents' list")
    return data


def _rank_files(path, notes):
    """The rank files PATH.rank<r>.json a failed job left beside `path`, with their times: only
    regular files of this uid (as the runtime writes them); the others are skipped with a note."""
    found = []
    for r in sorted(glob.glob(glob.escape(path) + ".rank*.json")):
        if not re.fullmatch(r"\.rank[0-9]+\.json", r[len(path):]):
            continue
        try:
            st = os.lstat(r)
        except OSError:
            continue
        why = _not_a_rank_file_of_yours(st)
        if why:
            notes.append(f"skipped {r}: {why}")
        else:
            found.append((r, st.st_mtime))
    return found


def load(paths, max_mib=DEFAULT_MAX_MIB):
    """The events of one merged trace, or of rank files merged; (events, notes)."""
    max_bytes = max_mib << 20
    files, notes = [], []  # files: (path, found beside a named one)
    for p in paths:
        ranks = _rank_files(p, notes)
        # A job that failed leaves rank files; a merged file older than them is an earlier job's.
        if os.path.exists(p) and not (ranks and ranks[0][1] >= os.path.getmtime(p)):
            files.append((p, False))
        elif ranks:
            if os.path.exists(p):
                notes.append(f"{p} is older than its rank files (an earlier job's): read the "
                             "rank files")
            files.extend((r, True) for r, _ in ranks)
        else:
            raise TraceError(f"{p}: no such file, and no {p}.rank<r>.json of yours beside it")
    events = []
    for f, found in files:
        data = _load_one(f, max_bytes, found, notes)
        other = data.get("otherData")
        other = other if isinstance(other, dict) else {}
        if other.get("disco_rank_file"):
            notes.append(f"{os.path.basename(f)}: rank {other.get('rank')}'s own file "
                         f"({other.get('why', '?')}); its clock is not aligned with the others'")
        events.extend(data["traceEvents"])
    return events, notes


def check(events):
    """Raises TraceError naming the first event Perfetto / chrome://tracing would not read."""
    if not events:
        raise TraceError("the trace has no events")
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise TraceError(f"event {i} is not an object: {str(e)[:200]}")
        for key in ("name", "ph", "pid"):
            if key not in e:
                raise TraceError(f"event {i} has no '{key}': {str(e)[:200]}")
        if (not isinstance(e["name"], str) or not isinstance(e["pid"], int)
                or isinstance(e["pid"], bool)):
            raise TraceError(f"event {i}: name must be a string and pid an integer: {str(e)[:200]}")
        if not isinstance(e.get("args", {}), dict):
            raise TraceError(f"event {i}: 'args' is not an object: {str(e)[:200]}")
        for key in ("seq", "frame_bytes", "bytes", "wait_us", "datasets", "worker", "graph",
                    "calls", "request_bytes", "reply_bytes", "events", "sort_index"):
            if key in e.get("args", {}) and not number(e["args"][key]):
                raise TraceError(f"event {i}: args.{key} is not a number: {str(e)[:200]}")
        if e["ph"] == "X":
            for key in ("ts", "dur", "tid"):
                if not number(e.get(key)):
                    raise TraceError(f"event {i} ('X') has no numeric '{key}': {str(e)[:200]}")
            if e["dur"] < 0:
                raise TraceError(f"event {i} has a negative duration: {e}")
            if e.get("cat") not in KINDS:
                raise TraceError(f"event {i} has an unknown category {e.get('cat')!r}: {e}")
        elif e["ph"] != "M":
            raise TraceError(f"event {i} has phase {e['ph']!r} (disco writes 'X' and 'M'): {e}")


def _union(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def summarize(events, top=10):
    """The lines of the summary."""
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        return ["no spans in this trace"]
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e.get("args", {}).get("name", "")
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e["dur"] for e in spans)
    window = max(t1 - t0, 1e-9)
    out = [f"trace: {len(spans)} spans of {len({e['pid'] for e in spans})} rank(s) over "
           f"{window / 1e3:.1f} ms"]
    out.append(f"{'rank':>4}  {'compute':>8}  {'collective':>10}  {'(waiting)':>9}  {'idle':>6}  "
               f"{'runs':>6}")
    for pid in sorted({e["pid"] for e in spans}):
        mine = [e for e in spans if e["pid"] == pid]
        runs = [(e["ts"], e["ts"] + e["dur"]) for e in mine if e["cat"] == "run"]
        coll = [(e["ts"], e["ts"] + e["dur"]) for e in mine if e["cat"] == "collective"]
        wait = sum(e.get("args", {}).get("wait_us", 0.0) for e in mine if e["cat"] == "collective")
        busy = _union(runs)
        in_coll = _union(coll)
        compute = max(0.0, busy - in_coll)
        idle = max(0.0, window - busy)
        out.append(f"{pid:>4}  {100 * compute / window:>7.1f}%  {100 * in_coll / window:>9.1f}%  "
                   f"{100 * wait / window:>8.1f}%  {100 * idle / window:>5.1f}%  "
                   f"{len(runs):>6}   {names.get(pid, '')}")
    coll = sorted((e for e in spans if e["cat"] == "collective"), key=lambda e: -e["dur"])
    if coll:
        out.append(f"slowest collectives (of {len(coll)}):")
        for e in coll[:min(top, 3)]:
            a = e.get("args", {})
            out.append(f"  {e['name']} on rank {e['pid']}: {e['dur'] / 1e3:.3f} ms, "
                       f"{a.get('bytes', 0)} bytes, {a.get('wait_us', 0.0) / 1e3:.3f} ms of it in "
                       f"the agreement round, at {(e['ts'] - t0) / 1e3:.1f} ms")
    per_fn = defaultdict(lambda: [0, 0.0])
    for e in spans:
        if e["cat"] == "run" and not e["name"].startswith("graph "):
            per_fn[e["name"]][0] += 1
            per_fn[e["name"]][1] += e["dur"]
    for e in spans:  # calls inside replays: "graph 1 call 5 'llama.mlp'"
        if e["cat"] == "run" and e["name"].startswith("graph ") and "'" in e["name"]:
            fn = e["name"].split("'")[1] + " (replayed)"
            per_fn[fn][0] += 1
            per_fn[fn][1] += e["dur"]
    if per_fn:
        out.append("top functions (every rank):")
        for fn, (n, total) in sorted(per_fn.items(), key=lambda kv: -kv[1][1])[:top]:
            out.append(f"  {total / 1e3:>10.3f} ms  {n:>7} calls  {total / n:>10.1f} us each  {fn}")
    cmds = [e for e in spans if e["cat"] == "command"]
    syncs = [e for e in spans if e["cat"] == "sync"]
    if cmds or syncs:
        frame = sum(e.get("args", {}).get("frame_bytes", 0) for e in cmds)
        out.append(f"controller: {len(cmds)} commands ({frame} frame bytes, "
                   f"{sum(e['dur'] for e in cmds) / 1e3:.3f} ms sending), {len(syncs)} syncs "
                   f"({sum(e['dur'] for e in syncs) / 1e3:.3f} ms waiting)")
    io = [e for e in spans if e["cat"] in ("hdf5_read", "hdf5_write")]
    if io:
        nbytes = sum(e.get("args", {}).get("bytes", 0) for e in io)
        out.append(f"hdf5: {len(io)} dataset reads/writes, {nbytes / 2**20:.1f} MiB, "
                   f"{sum(e['dur'] for e in io) / 1e3:.1f} ms")
    return out


COLOURS = {"run": "#4e79a7", "collective": "#e15759", "command": "#59a14f", "sync": "#bab0ac",
           "replay": "#76b7b2", "hdf5_read": "#f28e2b", "hdf5_write": "#edc948",
           "remote": "#b07aa1"}


def render_png(events, png, max_spans=40000):
    """Draws the timeline with gnuplot; raises TraceError when gnuplot is missing or fails."""
    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        raise TraceError("--png needs gnuplot (Debian: apt-get install gnuplot-nox)")
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        raise TraceError("no spans to draw")
    t0 = min(e["ts"] for e in spans)
    # Rows: (rank, track); a nested collective sits on a row of its own under its rank's commands.
    def row_of(e):
        sub = 0 if e["tid"] == 0 else (2 if e["cat"] == "collective" else 1)
        return (e["pid"], sub)
    rows = sorted({row_of(e) for e in spans})
    index = {r: i for i, r in enumerate(rows)}
    labels = {0: "controller", 1: "commands", 2: "collectives"}
    spans.sort(key=lambda e: -e["dur"])  # the longest first, should there be too many
    out_dir = os.path.dirname(os.path.abspath(png))
    if not os.path.isdir(out_dir):
        raise TraceError(f"--png {png}: the directory {out_dir} does not exist")
    # gnuplot runs in a temporary directory and reads and writes only names made here: no path
    # the user gave (nor TMPDIR) reaches its script. The PNG is copied out by Python.
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for e in spans[:max_spans]:
            f = files.get(e["cat"])
            if f is None:
                f = files[e["cat"]] = open(os.path.join(tmp, e["cat"] + ".dat"), "w")
            x0 = (e["ts"] - t0) / 1e3
            y = len(rows) - 1 - index[row_of(e)]
            f.write(f"{x0 + e['dur'] / 2e3:.6f} {y} {e['dur'] / 2e3:.6f} 0.35\n")
        for f in files.values():
            f.close()
        ytics = ", ".join(f'"rank {r[0]} {labels[r[1]]}" {len(rows) - 1 - i}'
                          for i, r in enumerate(rows))
        plots = ", ".join(
            f"'{cat}.dat' using 1:2:3:4 with boxxyerror "
            f"fs solid 0.9 noborder lc rgb '{COLOURS[cat]}' title '{cat}'"
            for cat in KINDS if cat in files)
        script = f"""
set terminal pngcairo size 1600,{max(300, 60 * len(rows) + 120)} font ',10'
set output 'timeline.png'
set title 'disco timeline ({len(spans)} spans)'
set xlabel 'time (ms)'
set ytics ({ytics})
set yrange [-0.7:{len(rows) - 0.3}]
set key outside right top
set grid xtics
plot {plots}
"""
        r = subprocess.run([gnuplot], input=script.encode(), capture_output=True, cwd=tmp)
        made = os.path.join(tmp, "timeline.png")
        if r.returncode != 0 or not os.path.exists(made):
            why = r.stderr.decode(errors="replace").strip() or f"exit {r.returncode}"
            raise TraceError(f"gnuplot failed: {why}")
        try:
            shutil.copyfile(made, png)
        except OSError as e:
            raise TraceError(f"--png {png}: {e}") from None


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m disco.trace",
                                description=__doc__.split("\n")[0])
    p.add_argument("trace", nargs="+", help="DISCO_TRACE's file (or its rank files)")
    p.add_argument("--png", help="draw the timeline into this PNG (gnuplot)")
    p.add_argument("--top", type=int, default=10, help="functions listed (default 10)")
    p.add_argument("--check", action="store_true", help="validate the structure only")
    p.add_argument("--max-mib", type=int, default=DEFAULT_MAX_MIB,
                   help=f"the largest file read, in MiB (default {DEFAULT_MAX_MIB})")
    a = p.parse_args(argv)
    if a.top < 1:
        p.error(f"--top must be at least 1, not {a.top}")
    if not 1 <= a.max_mib <= 1 << 30:
        p.error(f"--max-mib must be 1 to {1 << 30}, not {a.max_mib}")
    # Names from the file are printed as they are: a lone surrogate must not end the run.
    sys.stdout.reconfigure(errors="backslashreplace")
    try:
        events, notes = load(a.trace, a.max_mib)
        check(events)
        for n in notes:
            print(f"note: {n}")
        if a.check:
            print(f"ok: {len(events)} events, each readable by Perfetto / chrome://tracing")
            return 0
        print("\n".join(summarize(events, a.top)))
        if a.png:
            render_png(events, a.png)
            print(f"timeline: {a.png}")
    except TraceError as e:
        print(f"disco.trace: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug of this tool: still one line, never a traceback
        print(f"disco.trace: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
