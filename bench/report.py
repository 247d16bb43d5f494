"""bench/decode_bench.py's figures: medians, each against the machine's bound (decode against
the memory bandwidth, prefill against sgemm peak), the ratios of disco to each baseline with the
refusals, as a markdown table and as JSON. Pure functions of the measurements: the tests of
tests/bench run them on made-up figures."""

import statistics

import checkpoint

# q8_0 and disco's int8: 32 int8 and a float16 scale per block
BYTES = {"float32": 4.0, "bfloat16": 2.0, "q8_0": 34.0 / 32.0, "int8": 34.0 / 32.0}


def row_key(r):
    return (r["model"], r["dtype"], r["batch"], r["who"], r["n"])


def label(who, n):
    unit = "rank" if who.startswith("disco") else "thread"
    return f"{who} {n} {unit}{'' if n == 1 else 's'}"


def medians(rows):
    """Each row's median prefill and decode tokens/s (None where it has none)."""
    for r in rows:
        for m in ("prefill", "decode"):
            r[m + "_median"] = statistics.median(r[m]) if r.get(m) else None
    return rows


def bounds(r, cfg, machine):
    """Adds decode_bound (tokens/s: B tokens per step, a step reading every weight once and the
    sequences' keys and values, kv_bytes, at the measured read bandwidth of n threads),
    decode_bound_beside (the same at the median of what n cores read beside the row's runs,
    read_beside) and prefill_gflops (2 flops per weight per prompt token, against sgemm peak at n
    threads) to row r."""
    n = r["n"]
    wbytes = checkpoint.weight_bytes_per_token(cfg, BYTES[r.get("weights", r["dtype"])])
    step = wbytes + r.get("kv_bytes", 0)
    bw = machine.get("bandwidth", {}).get(n, {}).get("read")
    r["decode_bound"] = None if not bw else r["batch"] * bw * 1e9 / step
    r["decode_of_bound"] = frac(r.get("decode_median"), r["decode_bound"])
    beside = r.get("read_beside")
    r["decode_bound_beside"] = (r["batch"] * statistics.median(beside) * 1e9 / step
                                if beside else None)
    r["decode_of_beside"] = frac(r.get("decode_median"), r["decode_bound_beside"])
    flops = 2.0 * checkpoint.weight_bytes_per_token(cfg, 1.0)
    peak = machine.get("sgemm", {}).get(n, {}).get("gflops")
    pre = r.get("prefill_median")
    r["prefill_gflops"] = None if pre is None else pre * flops / 1e9
    r["prefill_of_peak"] = frac(r["prefill_gflops"], peak)
    return r


def frac(x, y):
    return None if x is None or not y else x / y


def scaling_refusals(rows):
    """{(model, dtype, batch, who, metric): why} for each baseline (not disco) whose run at more
    threads is slower than its own 1-thread run: no ratio is printed against it there, since a
    user would take 1 thread and the ratio would flatter disco."""
    by = {row_key(r): r for r in rows}
    out = {}
    for r in rows:
        if r["who"].startswith("disco") or r["n"] == 1:
            continue
        one = by.get((r["model"], r["dtype"], r["batch"], r["who"], 1))
        for m in ("decode", "prefill"):
            x, y = r.get(m + "_median"), one and one.get(m + "_median")
            if x is not None and y is not None and x < y:
                out[row_key(r) + (m,)] = (f"{label(r['who'], r['n'])} ({x:.1f}) is slower than "
                                          f"its 1 thread ({y:.1f}): no ratio")
    return out


def ratios(rows, refusals):
    """[{model, dtype, batch, n, against, metric, ratio or None, why}]: disco at n ranks over
    each baseline at n threads, same model, dtype and batch."""
    by = {row_key(r): r for r in rows}
    out = []
    for d in (r for r in rows if r["who"] == "disco"):
        for b in (r for r in rows if not r["who"].startswith("disco") and r["n"] == d["n"] and
                  (r["model"], r["dtype"], r["batch"]) == (d["model"], d["dtype"], d["batch"])):
            for m in ("decode", "prefill"):
                why = refusals.get(row_key(b) + (m,)) or b.get("excluded")
                x, y = by[row_key(d)].get(m + "_median"), b.get(m + "_median")
                value = None if why or x is None or not y else x / y
                out.append(dict(model=d["model"], dtype=d["dtype"], batch=d["batch"], n=d["n"],
                                against=b["who"], metric=m, ratio=value, why=why))
    return out


def fmt(x, spec="{:.1f}"):
    return "-" if x is None else spec.format(x)


def pct(x):
    return "-" if x is None else f"{100 * x:.0f}%"


def table(rows):
    """The figures as markdown lines."""
    lines = ["| model | dtype | batch | who | prefill tok/s | of sgemm peak | decode tok/s | "
             "of bandwidth bound | of read beside | decode min-max | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        spread = (f"{min(r['decode']):.1f}-{max(r['decode']):.1f}" if r.get("decode") else "-")
        lines.append(
            f"| {r['model']} | {r['dtype']} | {r['batch']} | {label(r['who'], r['n'])} | "
            f"{fmt(r.get('prefill_median'))} | {pct(r.get('prefill_of_peak'))} | "
            f"{fmt(r.get('decode_median'))} | {pct(r.get('decode_of_bound'))} | "
            f"{pct(r.get('decode_of_beside'))} | {spread} | "
            f"{r.get('excluded') or r.get('note', '')} |")
    return lines


def ratio_table(rs):
    lines = ["| model | dtype | batch | disco ranks = threads | against | decode ratio | "
             "prefill ratio |", "|---|---|---|---|---|---|---|"]
    keyed = {}
    for x in rs:
        keyed.setdefault((x["model"], x["dtype"], x["batch"], x["n"], x["against"]), {})[
            x["metric"]] = x
    for (model, dtype, batch, n, against), m in keyed.items():
        cells = [fmt(m[k]["ratio"], "{:.2f}") if m[k]["ratio"] is not None
                 else f"refused: {m[k]['why']}" if m[k]["why"] else "-"
                 for k in ("decode", "prefill")]
        lines.append(f"| {model} | {dtype} | {batch} | {n} | {against} | {cells[0]} | "
                     f"{cells[1]} |")
    return lines
