#!/usr/bin/python3
"""A raw HTTP/2 (h2c) test client for abuse that grpcio will not send: frames written
with struct, header blocks with HPACK's literal-without-indexing form only (RFC 7541
6.2.2; no Huffman, no dynamic table), so no HTTP/2 library is needed (Debian 12's
python3-h2 is not installed by the bootstrap).

  h2_raw_client.py goaway --port P [--timeout S]
      connects, prints "connected" once the server's SETTINGS came, waits for a GOAWAY; prints
      "goaway last_stream=N error=E" and exits 0, or exits 1 (closed/timed out first).
  h2_raw_client.py rapid-reset --port P --streams N [--model M]
      opens N gRPC Generate streams on one connection, each HEADERS at once followed by
      RST_STREAM(CANCEL) (CVE-2023-44487's pattern); prints "sent=N goaway=0|1
      closed=0|1 seconds=S" (closed: the peer ended the connection before all were sent).
  h2_raw_client.py big-headers --port P --bytes B [--model M]
      one Generate stream whose header block carries a B-byte header (HEADERS +
      CONTINUATION frames); prints what came back: "answer=headers status=..",
      "answer=rst error=..", "answer=goaway error=.." or "answer=closed".
Every mode is bounded by --timeout (default 30 s).
"""
import argparse
import socket
import struct
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, CONTINUATION = 0, 1, 3, 4, 6, 7, 9
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
CANCEL = 0x8
MAX_FRAME = 16384


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", ftype, flags, stream) + payload


def hpack_int(value, prefix_bits, first_byte=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte | value])
    out = bytearray([first_byte | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name, value):
    """Literal header field without indexing, new name (RFC 7541 6.2.2)."""
    n, v = name.encode(), value.encode()
    return b"\x00" + hpack_int(len(n), 7) + n + hpack_int(len(v), 7) + v


def grpc_headers(model, extra=()):
    fields = [(":method", "POST"), (":scheme", "http"), (":path", "/weft.v1.Generation/Generate"),
              (":authority", "weft"), ("content-type", "application/grpc"), ("te", "trailers")]
    if model:
        fields.append(("x-weft-model", model))
    fields.extend(extra)
    return b"".join(literal(n, v) for n, v in fields)


class Conn:
    def __init__(self, port, timeout):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))

    def read_frame(self):
        """(type, flags, stream, payload), or None when the peer closed."""
        while True:
            if len(self.buf) >= 9:
                length = struct.unpack(">I", b"\x00" + self.buf[:3])[0]
                if len(self.buf) >= 9 + length:
                    ftype, flags, stream = struct.unpack(">BBI", self.buf[3:9])
                    payload = self.buf[9:9 + length]
                    self.buf = self.buf[9 + length:]
                    if ftype == SETTINGS and not flags & ACK:
                        self.sock.sendall(frame(SETTINGS, ACK, 0))
                    if ftype == PING and not flags & ACK:
                        self.sock.sendall(frame(PING, ACK, 0, payload))
                    return ftype, flags, stream & 0x7FFFFFFF, payload
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk

    def send_headers(self, stream, block, end_stream=False):
        first, rest = block[:MAX_FRAME], block[MAX_FRAME:]
        flags = (END_STREAM if end_stream else 0) | (0 if rest else END_HEADERS)
        out = [frame(HEADERS, flags, stream, first)]
        while rest:
            part, rest = rest[:MAX_FRAME], rest[MAX_FRAME:]
            out.append(frame(CONTINUATION, 0 if rest else END_HEADERS, stream, part))
        self.sock.sendall(b"".join(out))


def goaway(args):
    c = Conn(args.port, args.timeout)
    deadline = time.monotonic() + args.timeout
    # "connected" once the server's SETTINGS arrived: its transport has the connection
    # (one still in the listener's backlog at a drain would be reset, not sent GOAWAY).
    pending = []
    while True:
        try:
            f = c.read_frame()
        except socket.timeout:
            f = None
        if f is None:
            print("no settings", flush=True)
            return 1
        if f[0] == SETTINGS and not f[1] & ACK:
            break
        pending.append(f)
    print("connected", flush=True)
    for f in pending:
        if f[0] == GOAWAY:
            last, error = struct.unpack(">II", f[3][:8])
            print("goaway last_stream=%d error=%d" % (last & 0x7FFFFFFF, error), flush=True)
            return 0
    while time.monotonic() < deadline:
        try:
            f = c.read_frame()
        except socket.timeout:
            break
        if f is None:
            break
        if f[0] == GOAWAY:
            last, error = struct.unpack(">II", f[3][:8])
            print("goaway last_stream=%d error=%d" % (last & 0x7FFFFFFF, error), flush=True)
            return 0
    print("no goaway", flush=True)
    return 1


def rapid_reset(args):
    c = Conn(args.port, args.timeout)
    block = grpc_headers(args.model)
    start = time.monotonic()
    sent, closed = 0, 0
    batch = []
    try:
        for i in range(args.streams):
            stream = 2 * i + 1
            batch.append(frame(HEADERS, END_HEADERS, stream, block))
            batch.append(frame(RST_STREAM, 0, stream, struct.pack(">I", CANCEL)))
            if len(batch) >= 200:
                c.sock.sendall(b"".join(batch))
                sent = i + 1
                batch = []
        if batch:
            c.sock.sendall(b"".join(batch))
        sent = args.streams
    except OSError:
        closed = 1
    got_goaway = 0
    c.sock.settimeout(2)
    try:
        while True:
            f = c.read_frame()
            if f is None:
                closed = 1
                break
            if f[0] == GOAWAY:
                got_goaway = 1
    except (socket.timeout, OSError):
        pass
    print("sent=%d goaway=%d closed=%d seconds=%.3f" %
          (sent, got_goaway, closed, time.monotonic() - start), flush=True)
    return 0


def big_headers(args):
    c = Conn(args.port, args.timeout)
    c.send_headers(1, grpc_headers(args.model, [("x-padding", "a" * args.bytes)]), end_stream=True)
    while True:
        try:
            f = c.read_frame()
        except (socket.timeout, OSError):
            f = None
        if f is None:
            print("answer=closed", flush=True)
            return 0
        ftype, _, stream, payload = f
        if ftype == HEADERS and stream == 1:
            # The status is in the header block; print the raw block's printable part.
            text = "".join(chr(b) if 32 <= b < 127 else "." for b in payload)
            print("answer=headers block=%s" % text, flush=True)
            return 0
        if ftype == RST_STREAM and stream == 1:
            print("answer=rst error=%d" % struct.unpack(">I", payload)[0], flush=True)
            return 0
        if ftype == GOAWAY:
            print("answer=goaway error=%d" % struct.unpack(">II", payload[:8])[1], flush=True)
            return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["goaway", "rapid-reset", "big-headers"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--timeout", type=float, default=30)
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--bytes", type=int, default=65536)
    p.add_argument("--model", default="")
    args = p.parse_args()
    return {"goaway": goaway, "rapid-reset": rapid_reset, "big-headers": big_headers}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
