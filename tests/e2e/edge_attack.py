"""Hostile HTTP clients against a running weft-scheduler, from outside (stdlib only).

  edge_attack.py --pid=PID --http_port=P --metrics_port=M [--token=T] [--measure]
                 ATTACK [ATTACK ...]

Each attack prints one JSON line (`row: {...}`): what was sent, the status the scheduler
answered (0: none: reset, closed or hung past the guard), the seconds from the first
byte sent to the answer, the scheduler's VmRSS before/after and VmHWM after (MiB, from
/proc/PID/status), and whether a normal request (GET /v1/models) was served right after.
Without --measure every attack asserts the gated behaviour (413 / 415 / 431 / 408 /
503, memory growth under --max_growth_mib, the normal request served) and the script
ends with "edge_attack: ok"; with --measure it only reports (to measure an old binary).

Attacks: chunked (64 MiB chunked body), gzip (a gzip body of 1 GiB of zeros), headers
(1 MiB of headers), fields (2,000 small headers), slowloris_http (one connection
trickling its head; /livez timed meanwhile), slowloris_metrics (--trickle connections
trickling on the metrics port; /livez timed meanwhile), connections (--hold idle
connections, then one more request), json_keys (a 3.4 MB object of distinct keys).
"""

import argparse
import http.client
import json
import socket
import sys
import threading
import time
import zlib

GUARD_S = 10.0  # hang guard for an answer the gate should give at once


def mem(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) / 1024.0
    return out


def reset_hwm(pid):
    """VmHWM back to VmRSS (Linux >= 4.0), so each attack's peak is its own."""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
    except OSError:
        pass


def head(path, args, extra, method="POST"):
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1", "Content-Type: application/json"]
    if args.token:
        lines.append("Authorization: Bearer " + args.token)
    return ("\r\n".join(lines + extra) + "\r\n\r\n").encode()


def status_of(sock, timeout):
    """The status code of the first answer on `sock` (0: none within `timeout`)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def send_then_status(args, prefix, body_iter):
    """Sends `prefix` then the body pieces until the server stops reading; the answer."""
    s = socket.create_connection(("127.0.0.1", args.http_port))
    t0 = time.monotonic()
    sent = 0
    try:
        s.sendall(prefix)
        s.settimeout(GUARD_S)
        for piece in body_iter:
            s.sendall(piece)
            sent += len(piece)
    except OSError:
        pass  # the server closed: its answer is still in our receive buffer
    code = status_of(s, GUARD_S if args.gated else 120)
    dt = time.monotonic() - t0
    s.close()
    return code, dt, sent


def normal_request(args):
    c = http.client.HTTPConnection("127.0.0.1", args.http_port, timeout=GUARD_S)
    try:
        h = {"Authorization": "Bearer " + args.token} if args.token else {}
        c.request("GET", "/v1/models", headers=h)
        return c.getresponse().status
    except OSError:
        return 0
    finally:
        c.close()


def livez(args):
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", args.metrics_port, timeout=GUARD_S)
    try:
        c.request("GET", "/livez")
        code = c.getresponse().status
    except OSError:
        code = 0
    finally:
        c.close()
    return code, time.monotonic() - t0


def chunked(args):
    piece = b"x" * 65536
    frame = b"%x\r\n%s\r\n" % (len(piece), piece)
    total = 64 << 20

    def body():
        for _ in range(total // len(piece)):
            yield frame
        yield b"0\r\n\r\n"
    code, dt, sent = send_then_status(args, head("/v1/completions", args,
                                                  ["Transfer-Encoding: chunked"]), body())
    return {"status": code, "seconds": dt, "body_bytes_sent": sent}, 413


def gzip_bomb(args):
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (1 << 20)
    blob = b"".join(comp.compress(zeros) for _ in range(1024)) + comp.flush()
    code, dt, sent = send_then_status(
        args, head("/v1/completions", args,
                   ["Content-Encoding: gzip", "Content-Length: %d" % len(blob)]), [blob])
    return {"status": code, "seconds": dt, "compressed_bytes": len(blob),
            "inflated_bytes": 1 << 30}, 415


def many_headers(args, count, size):
    extra = ["X-Pad-%d: %s" % (i, "a" * size) for i in range(count)]
    code, dt, _ = send_then_status(args, head("/v1/models", args, extra, "GET"), [])
    return {"status": code, "seconds": dt, "header_bytes": count * (size + 12)}, 431


def slowloris_http(args):
    s = socket.create_connection(("127.0.0.1", args.http_port))
    req = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 1000
    t0 = time.monotonic()
    code, lat = 0, []
    s.settimeout(0.5)
    for b in req:
        try:
            s.send(bytes([b]))
            data = s.recv(4096)
            code = int(data.split(b" ", 2)[1]) if data else -1
            break
        except socket.timeout:
            pass
        except OSError:
            break
        if len(lat) < 3:
            lat.append(livez(args))
        if time.monotonic() - t0 > args.slow_guard:
            break
    s.close()
    return {"status": code, "seconds": time.monotonic() - t0,
            "livez": [c for c, _ in lat], "livez_max_s": max(t for _, t in lat)}, 408


def slowloris_metrics(args):
    socks = []
    stop = threading.Event()
    for _ in range(args.trickle):
        s = socket.create_connection(("127.0.0.1", args.metrics_port))
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
        socks.append(s)

    def trickle():
        while not stop.is_set():
            for s in socks:
                try:
                    s.send(b"X")
                except OSError:
                    pass
            stop.wait(0.5)
    t = threading.Thread(target=trickle)
    t.start()
    time.sleep(1.0)  # let the trickling connections be accepted and start their heads
    results = [livez(args) for _ in range(5)]
    stop.set()
    t.join()
    for s in socks:
        s.close()
    codes = [c for c, _ in results]
    return {"status": max(codes) if all(c == 200 for c in codes) else min(codes),
            "trickling": args.trickle, "livez": codes,
            "livez_max_s": max(t for _, t in results)}, 200


def auth_line(args):
    return ("Authorization: Bearer %s\r\n" % args.token).encode() if args.token else b""


def gauge(args, name):
    """The value of scheduler gauge `name` on /metrics (None when unreadable)."""
    c = http.client.HTTPConnection("127.0.0.1", args.metrics_port, timeout=GUARD_S)
    try:
        c.request("GET", "/metrics")
        for line in c.getresponse().read().decode().splitlines():
            key, _, value = line.rpartition(" ")
            if key == name or key.startswith(name + "{"):
                return float(value)
    except (OSError, ValueError):
        pass
    finally:
        c.close()
    return None


def wait_gauge(args, name, want, guard=60.0):
    """Polls gauge `name` until it equals `want` (an event; `guard` is a hang guard)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < guard:
        if gauge(args, name) == want:
            return True
        time.sleep(0.01)
    return False


def connections(args):
    # The earlier attacks' connections have left: every slot under the cap is free.
    if not wait_gauge(args, "weft_http_connections", 0):
        return {"status": -1, "held": 0, "error": "earlier connections still open",
                "busy": gauge(args, "weft_http_connections")}, 503
    held = []
    for _ in range(args.hold):
        held.append(socket.create_connection(("127.0.0.1", args.http_port)))
    # Every held connection has its thread (weft_http_connections counts the busy ones):
    # only then is the next one over the cap. Held connections are closed by the server
    # after --http_request_timeout_s without a request, so the next one follows at once.
    if not wait_gauge(args, "weft_http_connections", args.hold):
        return {"status": -2, "held": args.hold, "error": "held connections not accepted",
                "busy": gauge(args, "weft_http_connections")}, 503
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", args.http_port))
    try:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n%s\r\n" % auth_line(args))
    except OSError:
        pass
    code = status_of(s, GUARD_S if args.gated else 60)
    dt = time.monotonic() - t0
    s.close()
    for h in held:
        h.close()
    # The server has seen them leave (the normal request after this one needs a slot).
    left = wait_gauge(args, "weft_http_connections", 0)
    return {"status": code if left else -3, "seconds": dt, "held": args.hold}, 503


def json_keys(args):
    body = "{" + ",".join('"k%07d":0' % i for i in range(260000)) + "}"
    c = http.client.HTTPConnection("127.0.0.1", args.http_port, timeout=120)
    h = {"Content-Type": "application/json"}
    if args.token:
        h["Authorization"] = "Bearer " + args.token
    t0 = time.monotonic()
    try:
        c.request("POST", "/v1/completions", body=body.encode(), headers=h)
        code = c.getresponse().status
    except OSError:
        code = 0
    dt = time.monotonic() - t0
    c.close()
    return {"status": code, "seconds": dt, "body_bytes": len(body)}, 400


def completion(args):
    """Not an attack: a real generation (a worker must be attached)."""
    c = http.client.HTTPConnection("127.0.0.1", args.http_port, timeout=120)
    h = {"Content-Type": "application/json"}
    if args.token:
        h["Authorization"] = "Bearer " + args.token
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", headers=h,
              body=json.dumps({"prompt": "Hello", "max_tokens": 4}).encode())
    r = c.getresponse()
    text = json.loads(r.read())["choices"][0]["text"] if r.status == 200 else ""
    c.close()
    return {"status": r.status, "seconds": time.monotonic() - t0, "text_chars": len(text)}, 200


def health_connection_header(args):
    c = http.client.HTTPConnection("127.0.0.1", args.http_port, timeout=GUARD_S)
    c.request("GET", "/health")
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, (r.getheader("Connection") or "").lower()


def keepalive(args):
    """Serving: /health is 200 and the connection is kept alive."""
    code, conn = health_connection_header(args)
    return {"status": code if conn != "close" else -1, "connection": conn}, 200


def drain(args):
    """A drain has begun (the test sent SIGTERM): answers carry Connection: close."""
    t0 = time.monotonic()
    code, conn = 0, ""
    while time.monotonic() - t0 < GUARD_S:
        code, conn = health_connection_header(args)
        if code == 503:
            break
        time.sleep(0.05)
    return {"status": code if conn == "close" else -1, "connection": conn}, 503


ATTACKS = {
    "completion": completion,
    "keepalive": keepalive,
    "drain": drain,
    "chunked": chunked,
    "gzip": gzip_bomb,
    "headers": lambda a: many_headers(a, 128, 8000),
    "fields": lambda a: many_headers(a, 2000, 8),
    "slowloris_http": slowloris_http,
    "slowloris_metrics": slowloris_metrics,
    "connections": connections,
    "json_keys": json_keys,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--http_port", type=int, required=True)
    p.add_argument("--metrics_port", type=int, required=True)
    p.add_argument("--token", default="")
    p.add_argument("--measure", action="store_true")
    p.add_argument("--max_growth_mib", type=float, default=48)
    p.add_argument("--trickle", type=int, default=8)
    p.add_argument("--hold", type=int, default=16)
    p.add_argument("--slow_guard", type=float, default=30)
    p.add_argument("attacks", nargs="+")
    args = p.parse_args()
    args.gated = not args.measure
    for name in args.attacks:
        reset_hwm(args.pid)
        before = mem(args.pid)
        row, want = ATTACKS[name](args)
        after = mem(args.pid)
        row.update({"attack": name, "rss_before_mib": round(before["VmRSS"], 1),
                    "rss_after_mib": round(after["VmRSS"], 1),
                    "hwm_after_mib": round(after["VmHWM"], 1),
                    "normal_request": 200 if name == "drain" else normal_request(args)})
        for k in ("seconds", "livez_max_s"):
            if k in row:
                row[k] = round(row[k], 3)
        print("row: " + json.dumps(row, sort_keys=True), flush=True)
        if args.measure:
            continue
        assert row["status"] == want, (name, row)
        assert after["VmHWM"] - before["VmRSS"] < args.max_growth_mib, (name, row)
        assert row["normal_request"] == 200, (name, row)
    print("edge_attack: ok", file=sys.stderr)


if __name__ == "__main__":
    main()
