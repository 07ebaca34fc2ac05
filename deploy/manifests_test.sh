#!/usr/bin/env bash
# deploy/manifests_test.sh SCHEDULER WORKER MANIFEST... — the Kubernetes manifests are
# valid YAML (yamllint, strict) and every --flag a container passes to weft-scheduler or
# weft-worker is one that binary defines (a renamed flag would crash-loop the pods).
set -uo pipefail
SCHED=$1
WORKER=$2
shift 2
PY=/usr/bin/python3
fail=0
yamllint -s -d '{extends: relaxed, rules: {line-length: {max: 120}}}' "$@" || fail=1
known() { "$1" --helpfull 2>&1 | grep -o -- '--[a-z_0-9]*' | sort -u; }
KNOWN_SCHED=$(known "$SCHED")
KNOWN_WORKER=$(known "$WORKER")
# "binary flag" for every container arg of every manifest (python3-yaml comes with yamllint).
pairs=$("$PY" - "$@" <<'PY'
import sys, yaml
def walk(node):
    if isinstance(node, dict):
        if "command" in node and isinstance(node["command"], list):
            binary = node["command"][0].rsplit("/", 1)[-1]
            for a in node.get("args", []) + node["command"][1:]:
                if isinstance(a, str) and a.startswith("--"):
                    print(binary, a.split("=", 1)[0])
        for v in node.values():
            walk(v)
    elif isinstance(node, list):
        for v in node:
            walk(v)
for path in sys.argv[1:]:
    for doc in yaml.safe_load_all(open(path)):
        walk(doc)
PY
) || { echo "FAIL: cannot parse the manifests"; exit 1; }
n=0
while read -r bin flag; do
  [ -n "$bin" ] || continue
  case "$bin" in
    weft-scheduler) list=$KNOWN_SCHED ;;
    weft-worker) list=$KNOWN_WORKER ;;
    *) continue ;;
  esac
  n=$((n + 1))
  if ! grep -qx -- "$flag" <<<"$list"; then
    echo "FAIL: a $bin container passes $flag, which $bin does not define"
    fail=1
  fi
done <<<"$pairs"
echo "$n flags checked against the binaries"
[ "$n" -gt 0 ] || { echo "FAIL: no weft container args found"; fail=1; }
[ "$fail" = 0 ] && echo PASS
exit $fail
