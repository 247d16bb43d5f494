"""A disco timeline (DISCO_TRACE) in the terminal, and as a PNG.

    python3 -m disco.trace TRACE.json [--png OUT.png] [--top N] [--check]

TRACE.json is what a job with DISCO_TRACE=TRACE.json wrote at its end, or, for a job that failed
or hung, the files TRACE.json.rank<r>.json its ranks left (given as TRACE.json, or each by name:
they are merged; their clocks are each rank's own, not aligned). It prints, per rank, the shares
of the trace's window spent running commands (compute), in collectives (moving data and waiting
in their agreement rounds for the slowest rank) and idle (waiting for the next command); the
slowest collectives; the functions that took the most time; and the controller's commands and
syncs. --png draws the timeline with gnuplot (Debian's gnuplot-nox): a row per rank and track, a
colour per kind. --check validates the file's structure (what Perfetto and chrome://tracing
need) and exits 1 naming the first bad event. The file opens unmodified in ui.perfetto.dev or
chrome://tracing.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

KINDS = ("command", "run", "collective", "hdf5_read", "hdf5_write", "sync", "replay", "remote")


class TraceError(ValueError):
    pass


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _load_one(path):
    if not os.path.isfile(path):
        raise TraceError(f"{path}: not a regular file")
    try:
        with open(path, "rb") as f:
            data = json.load(f, parse_constant=_no_constant)  # NaN and Infinity are not JSON
    except (OSError, ValueError, RecursionError) as e:
        raise TraceError(f"{path}: not a trace-event JSON file: {e}") from None
    if isinstance(data, list):  # the JSON Array Format
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path}: no 'traceEvents' list")
    return data


def load(paths):
    """The events of one merged trace, or of rank files merged; (events, notes)."""
    files, notes = [], []
    for p in paths:
        ranks = sorted(glob.glob(glob.escape(p) + ".rank*.json"))
        # A job that failed leaves rank files; a merged file older than them is an earlier job's.
        if os.path.exists(p) and not (ranks and os.path.getmtime(ranks[0]) >= os.path.getmtime(p)):
            files.append(p)
        elif ranks:
            if os.path.exists(p):
                notes.append(f"{p} is older than its rank files (an earlier job's): read the "
                             "rank files")
            files.extend(ranks)
        else:
            raise TraceError(f"{p}: no such file, and no {p}.rank<r>.json beside it")
    events = []
    for f in files:
        data = _load_one(f)
        other = data.get("otherData") or {}
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
    a = p.parse_args(argv)
    if a.top < 1:
        p.error(f"--top must be at least 1, not {a.top}")
    try:
        events, notes = load(a.trace)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
