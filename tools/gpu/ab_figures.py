#!/usr/bin/env python3
"""Turns tools/gpu/ab.sh's raw outputs into summary lines: "<card> <variant> <figure> <value> <unit>".

  ab_figures.py gbench CARD FILE.json    google-benchmark JSON (paged_attention / quant_gemm)
  ab_figures.py bench CARD FILE.json     weft-bench --json_out (medians over pairs, ratios)
  ab_figures.py metrics CARD VARIANT FILE  a worker's /metrics text (graph-step counters)
  ab_figures.py schedmetrics CARD VARIANT FILE  a scheduler's /metrics text (rank 0's
                                         execute and forward time, planning time, per step)
Standard library only (it runs on the GPU machine's python3).
"""
import json
import statistics
import sys


def line(card, variant, figure, value, unit):
    v = "nan" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
    print(f"{card}\t{variant}\t{figure}\t{v}\t{unit}")


def gbench(card, path):
    with open(path) as f:
        doc = json.load(f)
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or "error_occurred" in b and b["error_occurred"]:
            if b.get("error_occurred"):
                line(card, "-", b["name"], None, "error:" + b.get("error_message", "").replace(" ", "_"))
            continue
        label = b.get("label", "").split()
        # label: "<shape> <kernel>" (attention) or "<shape> <kernel> ..." (quant_gemm)
        variant = label[1] if len(label) > 1 else "-"
        figure = b["name"] + (("/" + label[0]) if label else "")
        line(card, variant, figure + ":time", float(b["real_time"]), b.get("time_unit", "us"))
        for counter, unit in (("GB/s", "GB/s"), ("roofline%", "%"), ("TFLOP/s", "TFLOP/s")):
            if counter in b:
                line(card, variant, figure + ":" + counter.rstrip("/s%"), float(b[counter]), unit)


METRICS = (("output_tok_s", "tok/s", None), ("req_s", "req/s", None),
           ("ttft_s", "s", "p50"), ("itl_s", "s", "p50"), ("itl_s", "s", "p99"),
           ("e2e_s", "s", "p50"))


def bench(card, path):
    with open(path) as f:
        doc = json.load(f)
    groups = {}
    for r in doc["runs"]:
        groups.setdefault((r["target"], r["level_label"]), []).append(r["summary"])
    for (target, level), runs in sorted(groups.items()):
        for key, unit, q in METRICS:
            vals = [(s[key][q] if q else s[key]) for s in runs]
            vals = [v for v in vals if v is not None]
            name = f"serve/{level}/{key}" + (f"_{q}" if q else "")
            line(card, target, name + f"(median of {len(vals)})",
                 float(statistics.median(vals)) if vals else None, unit)
        failed = sum(int(s.get("num_failed", 0) or 0) for s in runs)
        line(card, target, f"serve/{level}/failed_requests", failed, "requests")
    for c in doc.get("comparisons", []):
        for metric, m in c["ratios"].items():
            per = ",".join("nan" if x is None else f"{x:.3f}" for x in m["per_pair"])
            line(card, c["denominator"], f"serve/{c['level_label']}/{metric}:{c['numerator']}/this[{per}]",
                 None if m["median"] is None else float(m["median"]), "ratio(median)")


def prom(path):
    """A /metrics text as [(name with labels, value)], comments left out."""
    with open(path) as f:
        return [(raw.rsplit(None, 1)[0].replace(" ", ""), float(raw.rsplit(None, 1)[1]))
                for raw in f if raw.strip() and not raw.startswith("#")]


def totals(samples, names):
    """Each of `names` summed over its labels (absent names left out)."""
    out = {}
    for series, value in samples:
        name = series.split("{")[0]
        if name in names:
            out[name] = out.get(name, 0.0) + value
    return out


def metrics(card, variant, path):
    samples = prom(path)
    for series, value in samples:
        if series.startswith("weft_worker_graph_steps_total{") or series == "weft_worker_steps_total":
            line(card, variant, "worker/" + series, int(value), "steps")
    t = totals(samples, ("weft_worker_steps_total", "weft_worker_device_to_host_bytes_total",
                         "weft_worker_host_to_device_bytes_total", "weft_worker_step_seconds_sum"))
    steps = t.get("weft_worker_steps_total", 0)
    if steps <= 0:
        return
    if "weft_worker_step_seconds_sum" in t:
        line(card, variant, "worker/step_ms_mean", round(1e3 * t["weft_worker_step_seconds_sum"] / steps, 3),
             f"ms(over {int(steps)} steps, {t['weft_worker_step_seconds_sum']:.2f} s in all)")
    for total, label in (("weft_worker_device_to_host_bytes_total", "device_to_host"),
                         ("weft_worker_host_to_device_bytes_total", "host_to_device")):
        if total in t:
            line(card, variant, f"worker/{label}_bytes_per_step", round(t[total] / steps, 1),
                 f"bytes/step(over {int(steps)} steps)")


def schedmetrics(card, variant, path):
    t = totals(prom(path), ("weft_steps_total", "weft_worker_execute_seconds_total",
                            "weft_worker_forward_seconds_total", "weft_plan_seconds_total"))
    steps = t.get("weft_steps_total", 0)
    if steps <= 0:
        return
    for name, label, scale, unit in (
            ("weft_worker_execute_seconds_total", "worker_execute_ms_per_step", 1e3, "ms"),
            ("weft_worker_forward_seconds_total", "worker_forward_ms_per_step", 1e3, "ms"),
            ("weft_plan_seconds_total", "sched_plan_us_per_step", 1e6, "us")):
        if name in t:
            line(card, variant, f"sched/{label}", round(scale * t[name] / steps, 3),
                 f"{unit}(over {int(steps)} steps, rank 0 as the scheduler saw it)")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "gbench" and len(sys.argv) == 4:
        gbench(sys.argv[2], sys.argv[3])
    elif cmd == "bench" and len(sys.argv) == 4:
        bench(sys.argv[2], sys.argv[3])
    elif cmd == "metrics" and len(sys.argv) == 5:
        metrics(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "schedmetrics" and len(sys.argv) == 5:
        schedmetrics(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
