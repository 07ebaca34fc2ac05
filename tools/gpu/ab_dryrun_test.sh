#!/bin/bash
# shellcheck disable=SC2016,SC2317,SC2034,SC2013  # check() evals its condition; gone() is called through it
# tools/gpu/ab.sh's orchestration without a GPU (manual: it starts 4 scheduler+worker pairs
# on the default model with --backend=null): every variant comes up, weft-bench measures
# each target at every level, the greedy token ids match across variants, the workers'
# step counters are collected, and no process it started outlives it — also when it fails
# half-way (an unknown variant after one pair started).
#   bazel test //tools/gpu:ab_dryrun_test   (tagged manual; ~1 minute)
set -u
R=${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-__main__}
T=${TEST_TMPDIR:-$(mktemp -d)}
MODEL=$(dirname "$(readlink -f "$R/tools/models.txt")")/../models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "no default model at $MODEL (tools/bootstrap.sh)"; exit 1; }
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; fail=1; fi; }
gone() {  # every process group ab.sh started has ended (a killed one may take a moment to be reaped)
  local p alive
  for _ in $(seq 50); do
    alive=0; for p in $(cat "$1/pids.txt" 2>/dev/null); do kill -0 -- "-$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0; sleep 0.1
  done
  return 1
}
base=$((20000 + RANDOM % 20000))

export AB_BACKEND=null AB_PARTS=serve AB_BIN=$R AB_MODEL=$MODEL AB_N1=3 AB_N=12 AB_C=4,8 AB_PAIRS=1
OUT=$T/run AB_PORT_BASE=$base bash "$R/tools/gpu/ab.sh" > "$T/run.log" 2>&1; rc=$?
S=$T/run/summary.tsv; cat "$T/run.log"
check "exit status 0 (got $rc)" '[ $rc = 0 ]'
check "processes gone" 'gone "$T/run/raw"'
for v in base mixed grouped qgemm64; do
  for when in before after; do
    check "$v greedy $when identical" 'grep -qP "\t$v\tgreedy_${when}_identical_to_base\t1\t" "$S"'
  done
  for level in c=1 c=4 c=8; do
    check "$v served at $level" 'grep -qP "\t$v\tserve/$level/output_tok_s\(median of 1\)\t[0-9.e+]+\ttok/s" "$S"'
    check "$v no failed requests at $level" 'grep -qP "\t$v\tserve/$level/failed_requests\t0\t" "$S"'
  done
  check "$v greedy after the load identical to its own before" 'grep -qP "\t$v\tgreedy_after_identical_to_own_before\t1\t" "$S"'
  check "$v worker steps counted" 'grep -qP "\t$v\tworker/weft_worker_steps_total\t[1-9][0-9]*\tsteps" "$S"'
done
check "both weft-bench runs exited 0" '[ "$(grep -cP "\tall\tserve/bench_(c1|load)_exit_status\t0\t" "$S")" = 2 ]'
check "ratios base/each other variant" '[ "$(grep -cP "\tserve/c=8/output_tok_s:base/this" "$S")" = 3 ]'
check "token ids were printed" 'grep -qE "^before base: [0-9]+ [0-9]+" "$T/run/raw/greedy.txt"'

OUT=$T/bad AB_PORT_BASE=$((base + 100)) AB_VARIANTS="base nosuch" bash "$R/tools/gpu/ab.sh" > "$T/bad.log" 2>&1; rc=$?
check "unknown variant: exit 2 (got $rc)" '[ $rc = 2 ]'
check "unknown variant: the pair already started is gone" '[ -s "$T/bad/raw/pids.txt" ] && gone "$T/bad/raw"'
exit $fail
