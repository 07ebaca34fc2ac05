#!/usr/bin/env bash
# tools/bench/http_choice/measure.sh — the measurement behind the HTTP library choice for
# weft-scheduler's OpenAI API (README: tools/bench/http_choice/README.md). Builds two
# minimal servers with the same simulated engine (one thread stepping every 20 ms and
# pushing one SSE event to every open stream) — cpp-httplib (Debian's 0.11.4, one thread
# per connection) and Boost.Beast (asynchronous, 2 I/O threads) — and measures, A/B
# interleaved, `wrk` on GET /health and 64 / 256 concurrent SSE streams of 100 events.
# Needs: g++, libcpp-httplib-dev, libboost-dev, wrk (the last two are not in
# tools/bootstrap.sh: only this one-off measurement uses them).
set -euo pipefail
cd "$(dirname "$0")"
OUT=${1:-/tmp/weft-http-choice}
mkdir -p "$OUT"
g++ -O2 -std=c++17 httplib_server.cc -o "$OUT/httplib_server" $(pkg-config --cflags --libs cpp-httplib) -lpthread
g++ -O2 -std=c++17 beast_server.cc -o "$OUT/beast_server" -lpthread
"$OUT/httplib_server" 18081 300 20 & H=$!
"$OUT/beast_server" 18082 2 20 & B=$!
trap 'kill $H $B 2>/dev/null' EXIT
sleep 1
lscpu | grep -E "Model name|^CPU\(s\)"; uptime
for round in 1 2; do
  for p in 18081 18082; do
    echo "== /health, port $p ($([ $p = 18081 ] && echo httplib || echo beast)), round $round"
    wrk -t2 -c64 -d8s "http://127.0.0.1:$p/health" | grep -E "Requests/sec|Latency"
  done
  for c in 64 256; do
    echo "httplib: $(/usr/bin/python3 stream_client.py 18081 $H $c 100)"
    echo "beast:   $(/usr/bin/python3 stream_client.py 18082 $B $c 100)"
  done
done
uptime
