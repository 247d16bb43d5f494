#!/usr/bin/env python3
"""Checks a DISCO_TRACE file as a trace consumer would read it (written apart from disco.trace).

    check_trace.py TRACE.json --ranks N [--need CATEGORY ...] [--replayed FUNCTION] [--dropped]
    check_trace.py TRACE.json --ranks N --rank-files [--running NAME]

The file must be JSON with a 'traceEvents' list in which every event is an object with a string
'name', a 'ph' of 'X' (a complete span: numeric 'ts' and 'dur' >= 0, integer 'pid' and 'tid', an
'args' object) or 'M' (metadata), as chrome://tracing and Perfetto's importer read them; spans of
one track (pid, tid) must nest (none may end inside another that it started after), or the UIs
draw them wrongly. Then: a process (track) per rank 0..N-1 named by metadata; the categories
given to --need present (collectives on every rank, with their bytes; HDF5 spans with bytes);
rank 0's commands named after the functions they call; clocks aligned, with the error stated.
--replayed: the calls of a replayed graph appear, FUNCTION among them. --dropped: the ring
dropped events and said how many. --rank-files: the files TRACE.json.rank<r>.json a failed job
leaves, one per rank, each a complete trace of its own; --running: a span of that name in one.
"""

import argparse
import glob
import json
import sys
from collections import defaultdict


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def load(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: not JSON: {e}")
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        fail(f"{path}: no traceEvents list")
    return data


def check_events(path, events):
    spans = []
    for i, e in enumerate(events):
        where = f"{path}: event {i} {str(e)[:200]}"
        if not isinstance(e, dict) or not isinstance(e.get("name"), str):
            fail(f"{where}: not an object with a string name")
        if e.get("ph") not in ("X", "M"):
            fail(f"{where}: phase {e.get('ph')!r}")
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid", 0), int):
            fail(f"{where}: pid/tid not integers")
        if e["ph"] == "X":
            for k in ("ts", "dur"):
                if not isinstance(e.get(k), (int, float)) or isinstance(e.get(k), bool):
                    fail(f"{where}: '{k}' is not a number")
            if e["dur"] < 0:
                fail(f"{where}: negative duration")
            if e["ts"] < -1000:
                fail(f"{where}: starts {-e['ts']} us before the trace's origin")
            if not isinstance(e.get("args"), dict) or not isinstance(e.get("cat"), str):
                fail(f"{where}: no args object or category")
            spans.append(e)
    # Nesting per track: a span that starts inside another must end inside it (0.01 us of
    # rounding allowed).
    tracks = defaultdict(list)
    for e in spans:
        tracks[(e["pid"], e["tid"])].append(e)
    for key, evs in tracks.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            end = e["ts"] + e["dur"]
            while stack and stack[-1][0] <= e["ts"] + 0.01:
                stack.pop()
            if stack and end > stack[-1][0] + 0.01:
                fail(f"{path}: track {key}: '{e['name']}' at {e['ts']} ends at {end}, after "
                     f"'{stack[-1][1]}' that encloses its start ends ({stack[-1][0]})")
            stack.append((end, e["name"]))
    return spans


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--need", nargs="*", default=[])
    p.add_argument("--replayed")
    p.add_argument("--dropped", action="store_true")
    p.add_argument("--rank-files", action="store_true")
    p.add_argument("--running")
    a = p.parse_args()

    if a.rank_files:
        files = sorted(glob.glob(glob.escape(a.trace) + ".rank*.json"))
        if len(files) != a.ranks:
            fail(f"{len(files)} rank files, not {a.ranks}: {files}")
        found = False
        for f in files:
            data = load(f)
            if not data.get("otherData", {}).get("disco_rank_file"):
                fail(f"{f}: otherData does not say it is a rank file")
            spans = check_events(f, data["traceEvents"])
            if not spans:
                fail(f"{f}: no spans")
            found = found or any(e["name"] == a.running for e in spans)
        if a.running and not found:
            fail(f"no rank file has a span '{a.running}'")
        print(f"ok: {len(files)} rank files, each a valid trace"
              + (f"; '{a.running}' is there" if a.running else ""))
        return 0

    data = load(a.trace)
    events = data["traceEvents"]
    spans = check_events(a.trace, events)
    if data.get("otherData", {}).get("disco_trace") != 1:
        fail("otherData.disco_trace is not 1")
    names = {e["pid"]: e["args"].get("name", "") for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    if sorted(names) != list(range(a.ranks)):
        fail(f"process tracks {sorted(names)}, not ranks 0..{a.ranks - 1}")
    if sorted({e["pid"] for e in spans}) != list(range(a.ranks)):
        fail(f"spans on pids {sorted({e['pid'] for e in spans})}")
    cats = defaultdict(list)
    for e in spans:
        cats[e["cat"]].append(e)
    for need in a.need:
        if not cats.get(need):
            fail(f"no '{need}' spans (categories: {sorted(cats)})")
    if "collective" in a.need:
        for r in range(a.ranks):
            mine = [e for e in cats["collective"] if e["pid"] == r]
            if not mine or not any(e["args"].get("bytes", 0) > 0 for e in mine):
                fail(f"rank {r} has no collective with bytes")
            if any("wait_us" not in e["args"] for e in mine):
                fail(f"rank {r}: a collective without wait_us")
    for kind in ("hdf5_read", "hdf5_write"):
        if kind in a.need and not any(e["args"].get("bytes", 0) > 0 for e in cats[kind]):
            fail(f"no {kind} span with bytes")
    if "command" in a.need:
        named = [e for e in cats["command"] if e["name"].startswith("call_packed ")
                 and "." in e["name"]]
        if not named or any(e["pid"] != 0 for e in cats["command"]):
            fail("rank 0's call_packed commands are not named after their functions")
        if any("seq" not in e["args"] or "frame_bytes" not in e["args"] for e in cats["command"]):
            fail("a command without seq or frame_bytes")
    if a.replayed:
        calls = [e for e in cats["run"] if e["name"].startswith("graph ")
                 and f"'{a.replayed}'" in e["name"]]
        if not calls:
            fail(f"no replayed call of {a.replayed}")
    clock = [e for e in events if e["ph"] == "M" and e["name"] == "clock"]
    if not clock or not isinstance(clock[0]["args"].get("max_error_us"), (int, float)):
        fail("no clock metadata with max_error_us")
    dropped = [e for e in events if e["ph"] == "M" and e["name"] == "dropped"]
    if a.dropped and not (dropped and dropped[0]["args"].get("events", 0) > 0):
        fail("the ring dropped nothing, or did not say so")
    print(f"ok: {a.trace}: {len(spans)} spans, {a.ranks} ranks, categories {sorted(cats)}, clock "
          f"error {clock[0]['args']['max_error_us']} us"
          + (f", {dropped[0]['args']['events']} dropped" if dropped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
