#!/usr/bin/env bash
# config_test.sh HAPROXY_CFG MODEL_CFG... — Debian's haproxy accepts the shipped
# configuration with the example model backends (haproxy -c), gRPC-only and with the
# OpenAI HTTP frontend (WEFT_PROXY_HTTP_BIND), without warnings (but the ones that the
# examples' Kubernetes service names do not resolve here); and the proxy's
# own answers in errors/ are well-formed: a status line, a content-length equal to the
# body's, and for the OpenAI HTTP frontend (errors/openai/) a body in OpenAI's error shape
# whose HTTP status agrees with its "type".
set -uo pipefail
cfg=$1
shift
args=(-f "$cfg")
for m in "$@"; do args+=(-f "$m"); done
check() {  # label, then env assignments
  local label=$1
  shift
  local out rc
  out=$(env "$@" WEFT_PROXY_BIND=127.0.0.1:50051 WEFT_PROXY_ADMIN=127.0.0.1:8404 \
    /usr/sbin/haproxy -c "${args[@]}" 2>&1)
  rc=$?
  echo "== $label"
  echo "$out"
  if [ $rc != 0 ]; then echo "FAIL: $label: haproxy -c exited $rc"; exit 1; fi
  if grep "WARNING" <<<"$out" | grep -v -q "could not resolve address"; then
    echo "FAIL: $label: warnings"; exit 1
  fi
}
check "gRPC only"
check "gRPC and OpenAI HTTP" WEFT_PROXY_HTTP_BIND=127.0.0.1:8000
# The HTTP frontend is there only when asked for: a bind address that cannot parse is an
# error with WEFT_PROXY_HTTP_BIND set, and nothing without it.
if env WEFT_PROXY_BIND=127.0.0.1:50051 WEFT_PROXY_ADMIN=127.0.0.1:8404 \
  WEFT_PROXY_HTTP_BIND=not-an-address /usr/sbin/haproxy -c "${args[@]}" >/dev/null 2>&1; then
  echo "FAIL: WEFT_PROXY_HTTP_BIND is not used (no HTTP frontend?)"; exit 1
fi
# Every errorfile the configuration names exists (haproxy -c checks that too) and parses.
/usr/bin/python3 - "$(dirname "$cfg")" <<'PY' || exit 1
import glob, json, os, re, sys
root = sys.argv[1]
bad = []
files = sorted(glob.glob(os.path.join(root, "errors", "*.http")) +
               glob.glob(os.path.join(root, "errors", "openai", "*.http")))
for path in files:
    raw = open(path, "rb").read()
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    m = re.match(r"HTTP/1\.1 (\d{3}) ", lines[0])
    headers = dict(l.lower().split(": ", 1) for l in lines[1:])
    if not sep or not m:
        bad.append(path + ": no status line or no CRLF CRLF")
        continue
    if int(headers.get("content-length", -1)) != len(body):
        bad.append(path + ": content-length %s, body %d bytes" % (headers.get("content-length"), len(body)))
    if "/openai/" not in path:
        continue
    status = int(m.group(1))
    try:
        err = json.loads(body)["error"]
        assert set(err) == {"message", "type", "param", "code"}, err
        assert err["type"] == ("server_error" if status >= 500 else "invalid_request_error"), err
        assert headers.get("content-type") == "application/json", headers
    except Exception as e:  # noqa: BLE001 — any failure is reported with its file
        bad.append("%s: not an OpenAI error (%r)" % (path, e))
for b in bad:
    print("FAIL: " + b)
print("%d error files checked" % len(files))
sys.exit(1 if bad else 0)
PY
echo PASS
