#!/usr/bin/env bash
# config_test.sh HAPROXY_CFG MODEL_CFG... — Debian's haproxy accepts the shipped
# configuration with the example model backends (haproxy -c), without warnings (but the
# one that the examples' Kubernetes service names do not resolve here).
set -uo pipefail
cfg=$1
shift
args=(-f "$cfg")
for m in "$@"; do args+=(-f "$m"); done
out=$(WEFT_PROXY_BIND=127.0.0.1:50051 WEFT_PROXY_ADMIN=127.0.0.1:8404 /usr/sbin/haproxy -c "${args[@]}" 2>&1)
rc=$?
echo "$out"
if [ $rc != 0 ]; then echo "FAIL: haproxy -c exited $rc"; exit 1; fi
if grep "WARNING" <<<"$out" | grep -v -q "could not resolve address"; then
  echo "FAIL: warnings"; exit 1
fi
echo PASS
