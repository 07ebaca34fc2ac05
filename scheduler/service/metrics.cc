#include "scheduler/service/metrics.h"

#include <algorithm>
#include <memory>

namespace weft {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Labels;
using prometheus::Registry;

prometheus::Gauge& G(Registry& r, const Labels& l, const char* name, const char* help) {
  return BuildGauge().Name(name).Help(help).Labels(l).Register(r).Add({});
}
prometheus::Counter& C(Registry& r, const Labels& l, const char* name, const char* help) {
  return BuildCounter().Name(name).Help(help).Labels(l).Register(r).Add({});
}
prometheus::Histogram& H(Registry& r, const Labels& l, const char* name, const char* help,
                         const prometheus::Histogram::BucketBoundaries& b) {
  return BuildHistogram().Name(name).Help(help).Labels(l).Register(r).Add({}, b);
}

const prometheus::Histogram::BucketBoundaries kLatency = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5,
    0.75,  1,      2.5,   5,    10,    20,   40,    80,  160};

// The constant labels of every family: model="..." when a model name is given (an empty
// label value is the same as no label in Prometheus, so none is added then).
Labels ModelLabels(const std::string& model) {
  if (model.empty()) return {};
  return {{"model", model}};
}

}  // namespace

ServiceMetrics::ServiceMetrics(const std::string& model)
    : ServiceMetrics(std::make_shared<Registry>(), ModelLabels(model)) {}

ServiceMetrics::ServiceMetrics(std::shared_ptr<prometheus::Registry> r, const prometheus::Labels& l)
    : requests_running(G(*r, l, "weft_requests_running", "Requests with sequences scheduled on a replica.")),
      requests_waiting(G(*r, l, "weft_requests_waiting", "Requests waiting (queued or preempted).")),
      kv_blocks_used(G(*r, l, "weft_kv_blocks_used", "KV blocks referenced by sequences, all replicas.")),
      kv_blocks_cached(G(*r, l, "weft_kv_blocks_cached", "Free KV blocks kept for prefix-cache reuse.")),
      kv_blocks_total(G(*r, l, "weft_kv_blocks_capacity",
                             "KV blocks of all admitted replicas (used + cached + free).")),
      kv_usage_ratio(G(*r, l, "weft_kv_usage_ratio", "KV blocks used / total (autoscaling signal).")),
      replicas(G(*r, l, "weft_replicas", "Admitted replicas (draining ones included).")),
      replicas_draining(G(*r, l, "weft_replicas_draining",
                          "Replicas draining after a worker's SIGTERM: no new sequences, the "
                          "running ones finish (up to --worker_drain_timeout_s).")),
      worker_ranks_pending(G(*r, l, "weft_worker_ranks_pending",
                             "Worker ranks attached and waiting for the other ranks of their "
                             "replica.")),
      streams_open(G(*r, l, "weft_streams_open",
                       "Open generation calls: gRPC Generate streams and OpenAI HTTP "
                       "completions together (one --max_streams limit).")),
      stream_buffer_max_bytes(G(*r, l, "weft_stream_buffer_max_bytes",
                                "Most response bytes queued for one stream (capped by "
                                "--stream_buffer_bytes).")),
      draining(G(*r, l, "weft_draining", "1 while the scheduler drains after SIGTERM.")),
      http_connections(G(*r, l, "weft_http_connections",
                         "OpenAI HTTP API connections being served (one thread each).")),
      preemptions(C(*r, l, "weft_preemptions_total", "Sequences preempted (recomputed later).")),
      prefix_cache_hit_tokens(C(*r, l, "weft_prefix_cache_hit_tokens_total",
                                "Prompt tokens whose KV came from the prefix cache.")),
      prompt_tokens(C(*r, l, "weft_prompt_tokens_total", "Prompt tokens admitted.")),
      generated_tokens(C(*r, l, "weft_generated_tokens_total", "Tokens generated and streamed.")),
      stream_messages(C(*r, l, "weft_stream_messages_total",
                        "Messages handed to client streams (tokens travel in groups at large "
                        "batches: --stream_interval_tokens).")),
      requeued_requests(C(*r, l, "weft_requeued_requests_total",
                          "Requests re-queued (recomputed elsewhere with their tokens) after their "
                          "replica was fenced or its drain timed out.")),
      workers_rejected(C(*r, l, "weft_workers_rejected_total",
                         "Worker hellos refused (model fingerprint, shard layout, world size, "
                         "...); the reason is in the log and sent to the worker.")),
      worker_protocol_mismatches(C(*r, l, "weft_worker_protocol_mismatches_total",
                                   "Worker hellos refused for their Attach protocol version "
                                   "(both versions are in the log and sent to the worker); "
                                   "also counted in weft_workers_rejected_total.")),
      worker_forward_seconds(C(*r, l, "weft_worker_forward_seconds_total",
                               "Seconds rank 0 of the replicas spent in forward passes.")),
      worker_execute_seconds(C(*r, l, "weft_worker_execute_seconds_total",
                               "Seconds rank 0 of the replicas spent executing steps (plan diff, "
                               "forward, block copies, sampling).")),
      plan_seconds(C(*r, l, "weft_plan_seconds_total",
                     "Seconds the planning thread spent planning, encoding plans and applying "
                     "results.")),
      kv_tokens_sampled(C(*r, l, "weft_kv_tokens_sampled_total",
                          "Tokens stored by running sequences, summed over periodic samples.")),
      kv_slots_sampled(C(*r, l, "weft_kv_slots_sampled_total",
                         "KV slots held by running sequences' blocks (per owner), summed over "
                         "the same samples.")),
      grammar_masks(C(*r, l, "weft_grammar_masks_total",
                      "Structured output: token masks filled into plans.")),
      grammar_mask_seconds(C(*r, l, "weft_grammar_mask_seconds_total",
                             "Structured output: seconds filling token masks (mask threads).")),
      grammar_violations(C(*r, l, "weft_grammar_violations_total",
                           "Structured output: sampled tokens a grammar refused.")),
      grammar_mask_waits(C(*r, l, "weft_grammar_mask_waits_total",
                           "Structured output: constrained rows left for a later step because "
                           "their token mask was not ready in time.")),
      grammar_compiles(C(*r, l, "weft_grammar_compiles_total",
                         "Structured output: grammar compiles finished (successful or not).")),
      grammar_compile_seconds(C(*r, l, "weft_grammar_compile_seconds_total",
                                "Structured output: seconds spent compiling grammars.")),
      grammar_compile_refusals(C(*r, l, "weft_grammar_compile_refusals_total",
                                 "Structured output: constraints refused (invalid or past the "
                                 "compile time limit).")),
      grammar_compile_cache_hits(C(*r, l, "weft_grammar_compile_cache_hits_total",
                                   "Structured output: compiles answered from the cache.")),
      time_to_first_token(H(*r, l, "weft_time_to_first_token_seconds",
                            "Arrival to first generated token.", kLatency)),
      inter_token_latency(H(*r, l, "weft_inter_token_latency_seconds",
                            "Time between consecutive tokens of a sequence.", kLatency)),
      queue_time(H(*r, l, "weft_request_queue_time_seconds", "Arrival to first scheduling.", kLatency)),
      e2e_latency(H(*r, l, "weft_e2e_request_latency_seconds", "Arrival to the end of the stream.",
                    kLatency)),
      step_duration(H(*r, l, "weft_step_duration_seconds", "Plan sent to all results received.",
                      kLatency)),
      auth_reload_failures(C(*r, l, "weft_auth_reload_failures_total",
                             "Tokens-file reloads that failed (deleted, unreadable, not "
                             "parsing): no token is accepted until a good version loads.")),
      registry_(r),
      constant_labels_(l),
      steps_family_(BuildCounter().Name("weft_steps_total").Help("Steps completed, per replica.").Labels(l).Register(*r)),
      finished_family_(BuildCounter()
                           .Name("weft_requests_finished_total")
                           .Help("Requests finished, by finish reason.")
                           .Labels(l).Register(*r)),
      status_family_(BuildCounter()
                         .Name("weft_requests_status_total")
                         .Help("Generation calls ended (gRPC and OpenAI HTTP alike), by status "
                               "code (gRPC's names).")
                         .Labels(l).Register(*r)),
      fenced_family_(BuildCounter()
                         .Name("weft_replicas_fenced_total")
                         .Help("Replicas fenced, by reason.")
                         .Labels(l).Register(*r)),
      http_responses_family_(BuildCounter()
                                 .Name("weft_http_responses_total")
                                 .Help("OpenAI HTTP API responses, by HTTP status (499: the "
                                       "client left first; the connection gate's refusals "
                                       "408, 413, 415, 431 and 503 included).")
                                 .Labels(l).Register(*r)),
      tenant_admitted_family_(BuildCounter()
                                  .Name("weft_tenant_requests_admitted_total")
                                  .Help("Generation calls admitted, by tenant (the tokens "
                                        "file's names, or default).")
                                  .Labels(l).Register(*r)),
      tenant_rejected_family_(BuildCounter()
                                  .Name("weft_tenant_requests_rejected_total")
                                  .Help("Generation calls refused by a tenant limit, by tenant "
                                        "and reason (priority, streams, tokens_per_minute).")
                                  .Labels(l).Register(*r)) {}

prometheus::Counter& ServiceMetrics::Steps(const std::string& replica) {
  // Back again (a restart under the same name): its series is live, not departed.
  departed_replicas_.erase(std::remove(departed_replicas_.begin(), departed_replicas_.end(), replica),
                           departed_replicas_.end());
  return steps_family_.Add({{"replica", replica}});
}
void ServiceMetrics::ReplicaGone(const std::string& replica) {
  departed_replicas_.push_back(replica);
  while (departed_replicas_.size() > kDepartedReplicasKept) {
    steps_family_.Remove(&steps_family_.Add({{"replica", departed_replicas_.front()}}));
    departed_replicas_.pop_front();
  }
}
prometheus::Counter& ServiceMetrics::Finished(const std::string& reason) {
  return finished_family_.Add({{"reason", reason}});
}
prometheus::Counter& ServiceMetrics::ByStatus(const std::string& code) {
  return status_family_.Add({{"code", code}});
}
prometheus::Counter& ServiceMetrics::Fenced(const std::string& reason) {
  return fenced_family_.Add({{"reason", reason}});
}
prometheus::Counter& ServiceMetrics::TenantAdmitted(const std::string& tenant) {
  return tenant_admitted_family_.Add({{"tenant", tenant}});
}
prometheus::Counter& ServiceMetrics::TenantRejected(const std::string& tenant,
                                                    const std::string& reason) {
  return tenant_rejected_family_.Add({{"tenant", tenant}, {"reason", reason}});
}
prometheus::Counter& ServiceMetrics::HttpResponses(int status) {
  return http_responses_family_.Add({{"code", std::to_string(status)}});
}

}  // namespace weft
