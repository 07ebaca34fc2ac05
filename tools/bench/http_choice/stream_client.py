"""Opens C concurrent SSE streams of N tokens each; reports events received, wall time, and
the server's CPU seconds (from /proc/PID/stat), threads and RSS at the peak."""
import asyncio, os, sys, time

def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

def status(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key):
            return line.split()[1]

async def one(port, tokens, lat):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"POST /stream?tokens={tokens} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
    await w.drain()
    t0 = time.monotonic()
    n, buf = 0, b""
    while True:
        d = await r.read(65536)
        if not d:
            break
        buf += d
        n = buf.count(b"data: {")
        if b"data: [DONE]" in buf:
            break
    lat.append(time.monotonic() - t0)
    w.close()
    return n

async def main():
    port, pid, conns, tokens = map(int, sys.argv[1:5])
    lat = []
    c0, t0 = cpu(pid), time.monotonic()
    peak = {"threads": 0, "rss": 0}
    async def sample():
        while True:
            peak["threads"] = max(peak["threads"], int(status(pid, "Threads:")))
            peak["rss"] = max(peak["rss"], int(status(pid, "VmRSS:")))
            await asyncio.sleep(0.2)
    s = asyncio.create_task(sample())
    counts = await asyncio.gather(*[one(port, tokens, lat) for _ in range(conns)])
    s.cancel()
    wall, c1 = time.monotonic() - t0, cpu(pid)
    ev = sum(counts)
    print(f"streams={conns} tokens/stream={tokens} events={ev}/{conns*tokens} wall={wall:.2f}s "
          f"server_cpu={c1-c0:.2f}s cpu_us_per_event={(c1-c0)/max(ev,1)*1e6:.1f} "
          f"peak_threads={peak['threads']} peak_rss_kb={peak['rss']} max_stream_s={max(lat):.2f}")

asyncio.run(main())
