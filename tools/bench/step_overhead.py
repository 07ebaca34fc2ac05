#!/usr/bin/python3
"""step_overhead.py: the CPU cost of Weft's step path, without a GPU (BENCHMARKS.md).

For each concurrency C (and each repeat) it starts a fresh weft-scheduler and W
`weft-worker --backend=null` replicas (no model arithmetic: worker/backends/null_backend.h),
drives them with weft-bench (closed loop at C, max(min_requests, requests_per_stream x C)
requests, sharegpt-like by default), samples every `--interval_s`:
  * CPU time (utime + stime, all threads) of the scheduler, the workers and the client,
    from /proc/PID/stat, and the machine's busy time from /proc/stat;
  * the scheduler's /metrics: weft_generated_tokens_total, weft_steps_total,
    weft_worker_execute_seconds_total / weft_worker_forward_seconds_total (rank 0 of
    each replica, from every StepResult), weft_plan_seconds_total, weft_requests_running,
and reports over the steady-state window (the samples between `--window` fractions of the
run's generated tokens, default 20 %..80 %):
  sched_us_per_tok     scheduler process CPU / generated tokens        (target <= 5 at 256)
  worker_host_us_step  (execute - forward) seconds / steps: the worker's host work per
                       step outside the forward pass, as the worker measures it
                       (StateCache apply, batch building, sampling dispatch, result)
                                                                       (target <= 50 at 256)
  worker_cpu_us_step   worker process CPU / steps (adds gRPC receive/send, plan parse)
  plan_us_step         the scheduler's planning-thread time planning, encoding and
                       applying results (weft_plan_seconds_total) / steps
  tokens_per_message   generated tokens / stream messages (weft_stream_messages_total:
                       tokens travel in groups at large batches, --stream_interval_tokens)
  client_us_per_tok    weft-bench CPU / generated tokens (it shares the cores)
  other_cores          busy cores used by everything else on the machine (load)
The scheduler's metrics are scraped at each sample, which costs the scheduler a little CPU
(~1 ms a scrape); at the default 0.5 s interval that is noise next to what is measured.

Output: a table on stdout, and JSON (--json_out): {"machine", "config", "runs": [per run],
"summary": [per concurrency: medians over repeats]}. Logs and per-run files under --out.
Exit status: 0 ok; 1 a run failed (a process died, weft-bench reported failures).
Run it through tools/bench/step_overhead.sh (builds the binaries first).
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid):
    """utime + stime of every thread of `pid` (including exited ones), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_s():
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    v = [int(x) for x in parts]
    idle = v[3] + v[4]  # idle + iowait
    return (sum(v[:8]) - idle) / CLK_TCK  # user nice system idle iowait irq softirq steal


METRIC_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    sums = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = METRIC_RE.match(line)
        if m:
            sums[m.group(1)] = sums.get(m.group(1), 0.0) + float(m.group(3))
    return sums


def wait_for(cond, timeout_s, what):
    end = time.time() + timeout_s
    while time.time() < end:
        try:
            v = cond()
            if v:
                return v
        except Exception:  # not up yet
            pass
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def cpu_model():
    name, model = "?", "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and name == "?":
                name = line.split(":", 1)[1].strip()
            if line.startswith("model\t") and model == "?":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                amx = "amx_tile" in line
                break
    return {"cpu": name, "model": model, "amx": amx, "cores": os.cpu_count()}


class Cluster:
    def __init__(self, args, conc, run_dir):
        self.args = args
        self.run_dir = run_dir
        self.procs = []
        b = args.bin_dir
        ports_file = os.path.join(run_dir, "scheduler.ports.json")
        if os.path.exists(ports_file):
            os.remove(ports_file)  # a previous run's
        sched_flags = [
            f"--model={args.model}", "--host=127.0.0.1", "--port=0", "--worker_port=0",
            "--metrics_port=0", f"--ports_file={ports_file}",
            f"--max_num_seqs={max(256, conc)}", f"--max_streams={2 * conc + 64}",
            # weft-bench opens one connection: at the default 100 streams per connection
            # a run "at 256" would run ~90 requests at once, the rest waiting in the client.
            f"--grpc_max_concurrent_streams={2 * conc + 64}",
            f"--max_steps_in_flight={args.max_steps_in_flight}",
        ] + args.scheduler_flags.split()
        self.scheduler = self._start("scheduler", [f"{b}/scheduler/service/weft-scheduler"] + sched_flags)
        ports = wait_for(lambda: json.load(open(ports_file)), 60, "the scheduler's ports")
        self.port, self.metrics_port = ports["port"], ports["metrics_port"]
        blocks = args.num_kv_blocks or max(4096, conc * 100)
        self.workers = []
        for i in range(args.workers):
            self.workers.append(self._start(f"worker{i}", [
                f"{b}/worker/service/weft-worker", f"--scheduler=127.0.0.1:{ports['worker_port']}",
                f"--model={args.model}", f"--replica=r{i}", "--backend=null",
                f"--num_kv_blocks={blocks}", f"--null_step_ms={args.null_step_ms}",
                "--metrics_port=-1"] + args.worker_flags.split()))
        wait_for(lambda: scrape(self.metrics_port).get("weft_replicas", 0) >= args.workers, 120,
                 "the workers to attach")

    def _start(self, name, argv):
        log = open(os.path.join(self.run_dir, f"{name}.log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def alive(self):
        return all(p.poll() is None for p in [self.scheduler] + self.workers)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def sample(cluster, bench_pid):
    m = scrape(cluster.metrics_port)
    return {
        "t": time.monotonic(),
        "sched_cpu": proc_cpu_s(cluster.scheduler.pid),
        "worker_cpu": sum(proc_cpu_s(w.pid) or 0 for w in cluster.workers),
        "bench_cpu": proc_cpu_s(bench_pid) or 0,
        "busy": machine_busy_s(),
        "tokens": m.get("weft_generated_tokens_total", 0),
        "steps": m.get("weft_steps_total", 0),
        "execute_s": m.get("weft_worker_execute_seconds_total", 0),
        "forward_s": m.get("weft_worker_forward_seconds_total", 0),
        "plan_s": m.get("weft_plan_seconds_total", 0),
        "running": m.get("weft_requests_running", 0),
        "messages": m.get("weft_stream_messages_total", 0),
    }


def num_requests(args, conc):
    return max(args.min_requests, args.requests_per_stream * conc)


def window_of(samples, lo, hi):
    total = samples[-1]["tokens"]
    inside = [s for s in samples if lo * total <= s["tokens"] <= hi * total]
    if len(inside) < 2:
        return samples[0], samples[-1], samples, False
    return inside[0], inside[-1], inside, True


def one_run(args, conc, rep):
    run_dir = os.path.join(args.out, f"c{conc}-r{rep}")
    os.makedirs(run_dir, exist_ok=True)
    cluster = Cluster(args, conc, run_dir)
    try:
        bench_json = os.path.join(run_dir, "bench.json")
        bench_argv = [
            f"{args.bin_dir}/tools/bench/weft-bench", f"--target=grpc://127.0.0.1:{cluster.port}",
            f"--trace={args.trace}", f"--num_requests={num_requests(args, conc)}",
            f"--concurrency={conc}", "--progress=off", f"--seed={args.seed + rep}",
            f"--json_out={bench_json}", "--timeout_s=600",
        ]
        out = open(os.path.join(run_dir, "bench.out"), "w")
        bench = subprocess.Popen(bench_argv, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        perfs = []
        if args.perf:
            # Sampled on the software clock (these VMs expose no hardware counters), with
            # frame-pointer call graphs by default (our code keeps frame pointers; Debian's
            # gRPC and protobuf do not, so their callers are cut short: --perf_call_graph).
            for name, p in [("scheduler", cluster.scheduler)] + \
                    [(f"worker{i}", w) for i, w in enumerate(cluster.workers)]:
                perfs.append(subprocess.Popen(
                    ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(args.perf_hz),
                     "--call-graph", args.perf_call_graph, "-p", str(p.pid), "-o", os.path.join(run_dir, f"perf-{name}.data")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        samples = [sample(cluster, bench.pid)]
        while bench.poll() is None:
            time.sleep(args.interval_s)
            if not cluster.alive():
                bench.kill()
                raise RuntimeError(f"a server process died (logs in {run_dir})")
            try:
                samples.append(sample(cluster, bench.pid))
            except OSError:
                pass  # the client just exited
        for p in perfs:
            p.send_signal(signal.SIGINT)
            p.wait()
        if bench.returncode != 0:
            raise RuntimeError(f"weft-bench exited {bench.returncode} (see {run_dir}/bench.out)")
        s0, s1, inside, steady = window_of(samples, *args.window)
        dt = s1["t"] - s0["t"]
        tokens = s1["tokens"] - s0["tokens"]
        steps = s1["steps"] - s0["steps"]
        ours = (s1["sched_cpu"] - s0["sched_cpu"]) + (s1["worker_cpu"] - s0["worker_cpu"]) + \
            (s1["bench_cpu"] - s0["bench_cpu"])
        per_tok = lambda k: 1e6 * (s1[k] - s0[k]) / tokens if tokens else None
        per_step = lambda v: 1e6 * v / steps if steps else None
        run = {
            "concurrency": conc, "repeat": rep, "steady_window": steady,
            "window_s": round(dt, 3), "tokens": tokens, "steps": steps,
            "tok_per_s": tokens / dt if dt else None,
            "tokens_per_step": tokens / steps if steps else None,
            "running_mean": statistics.mean(s["running"] for s in inside),
            "tokens_per_message": (tokens / (s1["messages"] - s0["messages"])
                                   if s1["messages"] > s0["messages"] else None),
            "sched_us_per_tok": per_tok("sched_cpu"),
            "sched_cores": (s1["sched_cpu"] - s0["sched_cpu"]) / dt if dt else None,
            "worker_host_us_step": per_step((s1["execute_s"] - s0["execute_s"]) -
                                            (s1["forward_s"] - s0["forward_s"])),
            "worker_forward_us_step": per_step(s1["forward_s"] - s0["forward_s"]),
            "worker_cpu_us_step": per_step(s1["worker_cpu"] - s0["worker_cpu"]),
            "plan_us_step": per_step(s1["plan_s"] - s0["plan_s"]),
            "client_us_per_tok": per_tok("bench_cpu"),
            "other_cores": ((s1["busy"] - s0["busy"]) - ours) / dt if dt else None,
        }
        bs = json.load(open(bench_json))["runs"][0]["summary"]
        run["bench"] = {k: bs[k] for k in ("num_requests", "num_ok", "num_failed", "num_short",
                                           "output_tokens", "output_tok_s", "itl_s", "ttft_s")}
        if bs["num_failed"] or bs["num_short"]:
            raise RuntimeError(f"weft-bench: {bs['num_failed']} failed, {bs['num_short']} short")
        json.dump({"run": run, "samples": samples}, open(os.path.join(run_dir, "samples.json"), "w"),
                  indent=1)
        return run
    finally:
        cluster.stop()


COLUMNS = [
    ("conc", "concurrency", "{:>5}"), ("rep", "repeat", "{:>3}"), ("tok/s", "tok_per_s", "{:>8.0f}"),
    ("tok/step", "tokens_per_step", "{:>8.1f}"), ("running", "running_mean", "{:>7.0f}"),
    ("tok/msg", "tokens_per_message", "{:>7.2f}"),
    ("sched us/tok", "sched_us_per_tok", "{:>12.2f}"), ("sched cores", "sched_cores", "{:>11.2f}"),
    ("wkr host us/step", "worker_host_us_step", "{:>16.1f}"),
    ("wkr cpu us/step", "worker_cpu_us_step", "{:>15.1f}"), ("plan us/step", "plan_us_step", "{:>12.1f}"),
    ("client us/tok", "client_us_per_tok", "{:>13.2f}"), ("other cores", "other_cores", "{:>11.2f}"),
]


def row(r):
    cells = []
    for title, key, fmt in COLUMNS:
        v = r.get(key)
        width = len(title)
        cells.append(("{:>%d}" % width).format("-") if v is None else fmt.format(v).rjust(width))
    return "  ".join(cells)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin_dir", required=True, help="bazel-bin of a -c opt build")
    ap.add_argument("--model", required=True)
    ap.add_argument("--concurrency", default="64,256,1024")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--requests_per_stream", type=int, default=8)
    ap.add_argument("--min_requests", type=int, default=6000,
                    help="at least this many requests per run (a steady window of seconds)")
    ap.add_argument("--trace", default="sharegpt-like")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1, help="null replicas (one rank each)")
    ap.add_argument("--null_step_ms", type=float, default=0)
    ap.add_argument("--max_steps_in_flight", type=int, default=1,
                    help="the scheduler's; 1 (synchronous) keeps runs comparable, 0 = its own "
                    "default, by backend (null workers: 2)")
    ap.add_argument("--num_kv_blocks", type=int, default=0, help="0: max(4096, 100 x C)")
    ap.add_argument("--scheduler_flags", default="")
    ap.add_argument("--worker_flags", default="")
    ap.add_argument("--interval_s", type=float, default=0.5)
    ap.add_argument("--window", type=float, nargs=2, default=[0.2, 0.8])
    ap.add_argument("--out", default=f"/tmp/weft-step-overhead-{int(time.time())}")
    ap.add_argument("--json_out", default="")
    ap.add_argument("--perf", action="store_true",
                    help="perf record the scheduler and workers during each bench run "
                         "(perf-<process>.data in the run's directory)")
    ap.add_argument("--perf_hz", type=int, default=999)
    ap.add_argument("--perf_call_graph", default="fp",
                    help="fp, or dwarf[,size] to unwind through libraries built without "
                         "frame pointers (gRPC, protobuf)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    levels = [int(c) for c in args.concurrency.split(",")]
    machine = cpu_model()
    with open("/proc/loadavg") as f:
        machine["loadavg_at_start"] = f.read().split()[:3]
    config = {k: v for k, v in vars(args).items() if k not in ("bin_dir",)}
    print(f"# {machine['cpu']} (model {machine['model']}, AMX {'yes' if machine['amx'] else 'no'}), "
          f"{machine['cores']} cores, load {' '.join(machine['loadavg_at_start'])}; "
          f"null worker x{args.workers}, step {args.null_step_ms} ms, "
          f"max_steps_in_flight {args.max_steps_in_flight}, {args.trace}, "
          f"max({args.min_requests}, {args.requests_per_stream} x C) requests", flush=True)
    print("  ".join(t for t, _, _ in COLUMNS), flush=True)
    runs, failed = [], False
    # Repeats interleave the levels (C1 C2 C3 C1 C2 C3 ...), so load drifts hit all alike.
    for rep in range(args.repeats):
        for conc in levels:
            try:
                r = one_run(args, conc, rep)
            except Exception as e:  # report and go on with the other levels
                print(f"# c={conc} repeat {rep}: FAILED: {e}", flush=True)
                failed = True
                continue
            runs.append(r)
            print(row(r) + ("" if r["steady_window"] else "   (no steady window: whole run)"),
                  flush=True)
    summary = []
    for conc in levels:
        rs = [r for r in runs if r["concurrency"] == conc]
        if not rs:
            continue
        med = {"concurrency": conc, "repeat": "med", "runs": len(rs)}
        for _, key, _ in COLUMNS[2:]:
            vals = [r[key] for r in rs if r.get(key) is not None]
            med[key] = statistics.median(vals) if vals else None
        summary.append(med)
    if args.repeats > 1:
        print("# medians over repeats")
        for m in summary:
            print(row(m), flush=True)
    result = {"machine": machine, "config": config, "runs": runs, "summary": summary}
    path = args.json_out or os.path.join(args.out, "step_overhead.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"# JSON: {path}; logs under {args.out}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
