#!/usr/bin/python3
"""perf_components.py: where a Weft process's CPU goes, by component, from `perf record`.

  perf script -i perf-scheduler.data | tools/bench/perf_components.py --process scheduler \
      [--us_per_unit 7.5 --unit token]

Each sample's call chain (leaf first; record with --call-graph dwarf so that chains go
through Debian's gRPC and protobuf, which have no frame pointers) is put in the first
bucket whose rule matches a frame of the chain, rules in the order below: the outermost
*component* a sample belongs to (e.g. a sendmsg under Outbox::Push counts as "stream
writes"), with the kernel's context-switch and idle-poll samples split out. Prints each
bucket's share of the samples and, with --us_per_unit (the process's CPU per token or per
step from step_overhead.py), the microseconds per unit that share stands for.
"""

import argparse
import collections
import re
import sys

# (bucket, [regexes any of which, found in any frame, puts the sample there]) — first wins.
SCHEDULER_RULES = [
    ("gRPC thread: write done -> next write (per token per stream)",
     [r"ResponseReactor::OnWriteDone", r"Outbox::OnWriteDone", r"WorkerHandle::OnWriteDone",
      r"WriteQueue<weft::v1::GenerateResponse>::OnWriteDone"]),
    ("deliver: gRPC stream write (one per token per stream; sendmsg inline)",
     [r"Outbox::Push", r"Outbox::Pump", r"ServerCallbackWriterImpl::Write",
      r"WriteQueue<weft::v1::GenerateResponse>::(Push|Pump|Finish)",
      r"ResponseReactor::WriteMessage"]),
    ("deliver: metrics (histograms, counters)",
     [r"(Engine|ClientStreams)::(Deliver|Response).*", r"prometheus::"], "all"),
    ("deliver: response building, request lookup",
     [r"Engine::Deliver", r"ClientStreams::"]),
    ("apply: detokenize + stop check (StopChecker, TokenBytes)",
     [r"StopChecker::", r"TokenBytes", r"AppendTokenAndCheckStop"]),
    ("apply: core ApplyResults/ApplyToken (outputs, block hashes)",
     [r"Scheduler::ApplyResults", r"Scheduler::ApplyToken"]),
    ("apply: result decode, logprobs, step tracker (ApplyStep/HandleResult)",
     [r"Engine::ApplyStep", r"Engine::HandleResult", r"StepTracker::",
      r"StepDispatcher::(OnResult|ApplyStep|FailStep)"]),
    ("plan: Planner::Plan (core)",
     [r"Planner::", r"Scheduler::Plan\b", r"Scheduler::ExpireDeadlines"]),
    ("plan: EncodePlan (proto build)",
     [r"EncodePlan"]),
    ("plan: send to worker (WorkerHandle, serialize)",
     [r"WorkerHandle::", r"Engine::PlanReplicas", r"StepDispatcher::PlanSteps",
      r"WriteQueue<grpc::ByteBuffer>::"]),
    ("loop: gauges/health (Metrics(), Occupancy)",
     [r"UpdateGaugesAndHealth"]),
    ("loop: timers (deadlines, stalls)",
     [r"CheckTimers"]),
    ("loop: inbox events (submit, cancel)",
     [r"Engine::Handle\b", r"Engine::HandleSubmit", r"Scheduler::AddRequest"]),
    ("loop: wait/wake (inbox condvar)",
     [r"Engine::Loop"]),
    ("gRPC thread: worker result receive + parse",
     [r"WorkerReactor::", r"StepResult", r"WorkerMessage"]),
    ("gRPC thread: new call (validate, tokenize, submit)",
     [r"GenerationService::", r"ValidateRequest", r"ResponseReactor::ResponseReactor",
      r"Engine::Submit", r"Engine::Cancel", r"OnCancel", r"OnDone"]),
    ("metrics HTTP server (scrapes)",
     [r"civetweb", r"prometheus::", r"MetricsHttp"]),
    ("gRPC thread: sleep + wake-up (condvar/epoll waits, context switches)",
     [r"__schedule"]),
    ("gRPC thread: transport read (recvmsg, chttp2 parse)",
     [r"grpc_chttp2_perform_read", r"tcp_do_read", r"recvmsg"]),
    ("gRPC thread: poll/executor other",
     [r"epoll_wait", r"grpc_pollset_work", r"grpc_combiner", r"ExecCtx"]),
]

WORKER_RULES = [
    ("execute: StateCache apply (plan diff)",
     [r"StateCache::"]),
    ("execute: forward (null backend: validate, tokens, logits)",
     [r"NullBackend::Forward", r"NullBackend::Validate", r"NullBackend::WriteLogits",
      r"Backend::Forward", r"CpuBackend::Forward", r"LlamaModel::"]),
    ("execute: sampling dispatch (TrySampleOnDevice, SampleAll, Sampler)",
     [r"SampleOnDevice", r"SampleAll", r"Sampler::"]),
    ("execute: other (batch build, TokensHash, result fill)",
     [r"ModelExecutor::", r"TokensHash", r"MeteredExecutor::"]),
    ("gRPC: waiting for the next plan (poll, wake-up)",
     [r"ClientReaderWriter<.*>::Read", r"__schedule"], "all"),
    ("gRPC: result send + serialize (sendmsg inline)",
     [r"ClientReaderWriter<.*>::Write", r"WorkerMessage::(ByteSizeLong|_InternalSerialize)",
      r"StepResult::(ByteSizeLong|_InternalSerialize)"]),
    ("gRPC: plan receive + parse",
     [r"ClientReaderWriter<.*>::Read", r"StepPlan::_InternalParse",
      r"SchedulerMessage::_InternalParse"]),
    ("gRPC: plan/result messages freed",
     [r"~StepPlan", r"~SchedulerMessage", r"~WorkerMessage", r"~StepResult"]),
    ("gRPC: poll wait + wake-up (other threads)",
     [r"epoll_wait", r"__schedule"], "all"),
    ("gRPC: transport/poll",
     [r"epoll_wait", r"grpc_"]),
]

FRAME_RE = re.compile(r"^\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def samples(stream):
    chain = None
    for line in stream:
        if not line.strip():
            if chain is not None:
                yield chain
            chain = None
            continue
        if chain is None:
            chain = []  # header line (comm tid time event)
            continue
        m = FRAME_RE.match(line)
        if m:
            chain.append(m.group(1))
    if chain is not None:
        yield chain


def classify(chain, rules):
    text = "\n".join(chain)
    for rule in rules:
        name, patterns = rule[0], rule[1]
        mode = rule[2] if len(rule) > 2 else "any"
        if mode == "all":
            if all(re.search(p, text) for p in patterns):
                return name
        elif any(re.search(p, text) for p in patterns):
            return name
    leaf = chain[0] if chain else ""
    if "finish_task_switch" in text or "__schedule" in text:
        return "kernel: context switch / sleep-wake (unattributed)"
    if "[unknown]" in leaf or not chain:
        return "unattributed"
    if re.search(r"malloc|free|_int_", leaf):
        return "malloc/free (unattributed)"
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--process", choices=["scheduler", "worker"], default="scheduler")
    ap.add_argument("--us_per_unit", type=float, default=0)
    ap.add_argument("--unit", default="token")
    ap.add_argument("--show", default="",
                    help="also list the top frames of the buckets whose name contains this")
    args = ap.parse_args()
    rules = SCHEDULER_RULES if args.process == "scheduler" else WORKER_RULES
    counts = collections.Counter()
    shown = collections.Counter()
    n = 0
    for chain in samples(sys.stdin):
        bucket = classify(chain, rules)
        counts[bucket] += 1
        n += 1
        if args.show and args.show in bucket:
            # The innermost frame outside the kernel and libc, with its caller.
            if any("sendmsg" in f for f in chain):
                key = "sendmsg syscall (kernel TCP, incl. the loopback receiver's softirq)"
            elif any("__schedule" in f for f in chain):
                key = "sleep/wake (futex, preemption)"
            elif any(re.search(r"malloc|free|_int_", f) for f in chain[:2]):
                key = "malloc/free"
            else:
                key = " <- ".join(chain[:3])
            shown[key] += 1
    if n == 0:
        print("no samples")
        return 1
    print(f"{n} samples")
    for name, c in counts.most_common():
        share = c / n
        extra = f"  {share * args.us_per_unit:6.2f} us/{args.unit}" if args.us_per_unit else ""
        print(f"{100 * share:5.1f}%{extra}  {name}")
    for frames, c in shown.most_common(25):
        print(f"   {100 * c / n:5.1f}%  {frames[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
