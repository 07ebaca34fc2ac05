#!/usr/bin/env python3
"""What the OpenAI HTTP edge's connections cost (a measurement, not a test).

  tools/bench/http_connections.py --pid=PID --http_port=P [--counts=0,250,500,1000]
                                  [--samples=200] [--max_tokens=4000]

Against a running weft-scheduler (--http_port; give it --http_max_connections and
--max_streams above the largest count, and a worker) it opens, step by step, the
given numbers of streaming completions (`"stream": true`, each reading its SSE events
as they come), and at each step reports: connections the server holds (the count that
got an answer or is still waiting, vs. refused with 503/429), the scheduler's threads
and VmRSS (/proc/PID/status), RSS growth per connection over the step with no streams,
and the latency of a normal request (GET /v1/models on a keep-alive connection,
`--samples` of them, one after the other: p50/p99/max in ms). One JSON line per step.

The scheduler serves each HTTP connection on its own thread (GatedHttpServer), so this
is the number to decide whether an event-driven server is needed.
"""

import argparse
import http.client
import json
import resource
import selectors
import socket
import time


def status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "Threads"):
                out[k] = int(v.split()[0])
    return out


def open_stream(port, max_tokens):
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    s.setblocking(False)
    return s


def latencies(port, samples):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        c.request("GET", "/v1/models")
        r = c.getresponse()
        r.read()
        out.append((time.perf_counter() - t0) * 1000)
        if r.status != 200:
            out[-1] = float("inf")
    c.close()
    out.sort()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--http_port", type=int, required=True)
    p.add_argument("--counts", default="0,250,500,1000")
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--max_tokens", type=int, default=4000)
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    sel = selectors.DefaultSelector()
    socks = {}  # socket -> first bytes seen
    base = status(args.pid)

    def pump(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for key, _ in sel.select(timeout=0.05):
                s = key.fileobj
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(s)
                    socks[s] = socks[s] or b"closed"
                    continue
                if not socks[s]:
                    socks[s] = data[:16]

    for count in [int(c) for c in args.counts.split(",")]:
        while len(socks) < count:
            s = open_stream(args.http_port, args.max_tokens)
            socks[s] = b""
            sel.register(s, selectors.EVENT_READ)
            if len(socks) % 50 == 0:
                pump(0.05)
        pump(2.0)
        st = status(args.pid)
        lat = latencies(args.http_port, args.samples)
        answered = [v for v in socks.values() if v]
        row = {
            "streams_opened": count,
            "answered_200": sum(1 for v in answered if v.startswith(b"HTTP/1.1 200")),
            "answered_503": sum(1 for v in answered if v.startswith(b"HTTP/1.1 503")),
            "answered_other": sum(1 for v in answered
                                  if not v.startswith((b"HTTP/1.1 200", b"HTTP/1.1 503"))),
            "waiting": count - len(answered),
            "threads": st["Threads"],
            "rss_mib": round(st["VmRSS"] / 1024.0, 1),
            "rss_kib_per_connection": round((st["VmRSS"] - base["VmRSS"]) / count, 1) if count else None,
            "p50_ms": round(lat[len(lat) // 2], 2),
            "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
            "max_ms": round(lat[-1], 2),
        }
        print(json.dumps(row), flush=True)
        pump(0.5)
    for s in socks:
        s.close()


if __name__ == "__main__":
    main()
