#!/usr/bin/python3
"""step_overhead_ab.py: two builds (or two flag sets) of the step path, A/B interleaved.

  tools/bench/step_overhead_ab.py --a_bin_dir=/tmp/base --b_bin_dir="$(bazel info -c opt bazel-bin)" \
      --model=models/SmolLM2-135M-Instruct.Q4_1.gguf --pairs 5 --concurrency 256 \
      [--a_scheduler_flags "..."] [--b_scheduler_flags "..."] [-- step_overhead.py flags]

Runs tools/bench/step_overhead.py once per side per pair, alternating the order (A B, B A,
A B, ...) so that drifting load on a shared machine falls on both sides alike, and prints
each pair's scheduler CPU per generated token (sched_us_per_tok), tokens per stream message,
output tok/s and weft-bench's inter-token latency p50/p99 (a message of k tokens counts k-1
zero gaps), the per-pair ratio B / A and the median of the ratios (the figure to
quote, with the machine line and the `other cores` load that step_overhead.py prints).
JSON of every run: --out DIR (one step_overhead.py JSON per run, plus ab.json).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_side(args, side, pair, rest):
    out = os.path.join(args.out, f"p{pair}-{side}")
    js = out + ".json"
    cmd = [sys.executable, os.path.join(HERE, "step_overhead.py"),
           f"--bin_dir={getattr(args, side + '_bin_dir')}", f"--model={args.model}",
           f"--concurrency={args.concurrency}", f"--out={out}", f"--json_out={js}"]
    flags = getattr(args, side + "_scheduler_flags")
    if flags:
        cmd.append(f"--scheduler_flags={flags}")
    cmd += rest
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout)
        raise RuntimeError(f"{side} pair {pair}: step_overhead.py exited {p.returncode}")
    doc = json.load(open(js))
    r = doc["runs"][0]
    return {"sched_us_per_tok": r["sched_us_per_tok"], "tok_per_s": r["tok_per_s"],
            "tokens_per_message": r.get("tokens_per_message"), "other_cores": r["other_cores"],
            "itl_p50_ms": 1e3 * r["bench"]["itl_s"]["p50"],
            "itl_p99_ms": 1e3 * r["bench"]["itl_s"]["p99"],
            "machine": doc["machine"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a_bin_dir", required=True)
    ap.add_argument("--b_bin_dir", required=True)
    ap.add_argument("--a_scheduler_flags", default="")
    ap.add_argument("--b_scheduler_flags", default="")
    ap.add_argument("--model", required=True)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--out", default=f"/tmp/weft-step-overhead-ab-{int(time.time())}")
    args, rest = ap.parse_known_args()
    rest = [a for a in rest if a != "--"]
    os.makedirs(args.out, exist_ok=True)
    pairs = []
    for i in range(args.pairs):
        order = ("a", "b") if i % 2 == 0 else ("b", "a")
        got = {side: run_side(args, side, i, rest) for side in order}
        got["ratio"] = got["b"]["sched_us_per_tok"] / got["a"]["sched_us_per_tok"]
        pairs.append(got)
        fmt = lambda v: "-" if v is None else f"{v:.2f}"
        print(f"pair {i} ({''.join(order).upper()}): sched us/tok A {got['a']['sched_us_per_tok']:.2f} "
              f"B {got['b']['sched_us_per_tok']:.2f}  B/A {got['ratio']:.3f}  "
              f"tok/msg A {fmt(got['a']['tokens_per_message'])} B {fmt(got['b']['tokens_per_message'])}  "
              f"tok/s A {got['a']['tok_per_s']:.0f} B {got['b']['tok_per_s']:.0f}  "
              f"ITL p50/p99 ms A {got['a']['itl_p50_ms']:.2f}/{got['a']['itl_p99_ms']:.2f} "
              f"B {got['b']['itl_p50_ms']:.2f}/{got['b']['itl_p99_ms']:.2f}  "
              f"other cores A {got['a']['other_cores']:.2f} B {got['b']['other_cores']:.2f}", flush=True)
    med = {s: statistics.median(p[s]["sched_us_per_tok"] for p in pairs) for s in ("a", "b")}
    ratio = statistics.median(p["ratio"] for p in pairs)
    print(f"# {pairs[0]['a']['machine']}")
    print(f"# sched us/tok median A {med['a']:.2f}  B {med['b']:.2f}; median of B/A ratios "
          f"{ratio:.3f} over {len(pairs)} pairs")
    json.dump({"pairs": pairs, "median_a": med["a"], "median_b": med["b"], "median_ratio": ratio,
               "config": vars(args), "step_overhead_flags": rest},
              open(os.path.join(args.out, "ab.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
