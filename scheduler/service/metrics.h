// ServiceMetrics: every Prometheus metric weft-scheduler exports, in one registry.
// The planning thread updates them; prometheus-cpp metrics are thread-safe, so the
// HTTP exposer may read them at any time. Names follow DESIGN.md / the services issue.
#ifndef WEFT_SCHEDULER_SERVICE_METRICS_H_
#define WEFT_SCHEDULER_SERVICE_METRICS_H_

#include <deque>
#include <map>
#include <memory>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/labels.h"
#include "prometheus/registry.h"

namespace weft {

class ServiceMetrics {
 public:
  // `model` (the served model name), when not empty, is a constant label model="..." on
  // every series: one scheduler serves one model, and the label is what a Prometheus
  // adapter rule selects a model's autoscaling signals by (deploy/README.md).
  ServiceMetrics() : ServiceMetrics(std::string()) {}
  explicit ServiceMetrics(const std::string& model);

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // The labels every family carries (model="<served name>", or none).
  const prometheus::Labels& constant_labels() const { return constant_labels_; }

  // Gauges (set each iteration).
  prometheus::Gauge& requests_running;
  prometheus::Gauge& requests_waiting;
  prometheus::Gauge& kv_blocks_used;
  prometheus::Gauge& kv_blocks_cached;
  prometheus::Gauge& kv_blocks_total;
  prometheus::Gauge& kv_usage_ratio;
  prometheus::Gauge& replicas;
  // Of those, replicas draining after a worker's SIGTERM (no new sequences).
  prometheus::Gauge& replicas_draining;
  // Worker ranks attached and waiting for the other ranks of their replica.
  prometheus::Gauge& worker_ranks_pending;
  prometheus::Gauge& streams_open;
  prometheus::Gauge& stream_buffer_max_bytes;
  prometheus::Gauge& draining;
  // OpenAI HTTP API connections being served (one thread each; http_server.h).
  prometheus::Gauge& http_connections;

  // Counters.
  prometheus::Counter& preemptions;
  prometheus::Counter& prefix_cache_hit_tokens;
  prometheus::Counter& prompt_tokens;
  prometheus::Counter& generated_tokens;
  // Messages handed to client streams (after the stream interval held tokens back; a
  // lagging reader's writes may merge further). Tokens per message = generated / this.
  prometheus::Counter& stream_messages;
  prometheus::Counter& requeued_requests;
  // Worker hellos refused (fingerprint, shard layout, world size ...; the reason is
  // logged and sent to the worker).
  prometheus::Counter& workers_rejected;
  // Of those, the ones refused for their Attach protocol version (a worker older or newer
  // than this scheduler supports: common/protocol_version.h).
  prometheus::Counter& worker_protocol_mismatches;
  // Step overhead (BENCHMARKS.md): the workers' forward time and execute time (rank 0,
  // from each StepResult), and the planning thread's time planning, encoding plans and
  // applying results. Share of a step outside the forward pass =
  // 1 - forward / (step_duration sum + plan_seconds) when steps are not pipelined.
  prometheus::Counter& worker_forward_seconds;
  prometheus::Counter& worker_execute_seconds;
  prometheus::Counter& plan_seconds;
  // KV waste (BENCHMARKS.md): every ~0.5 s while sequences run, the tokens running
  // sequences store and the KV slots their blocks hold are added up; waste over a period
  // = 1 - (tokens increase) / (slots increase).
  prometheus::Counter& kv_tokens_sampled;
  prometheus::Counter& kv_slots_sampled;
  // Structured output: token masks filled (on the mask threads) and their time filling
  // them (mask time per constrained token = seconds / masks), and sampled tokens a grammar
  // refused (a worker that ignored its mask; each ends its sequence with an error).
  prometheus::Counter& grammar_masks;
  prometheus::Counter& grammar_mask_seconds;
  prometheus::Counter& grammar_violations;
  // Constrained rows left for a later step because their mask was not ready in time, and
  // the grammar compiles: finished, their seconds, refused, answered from the cache.
  prometheus::Counter& grammar_mask_waits;
  prometheus::Counter& grammar_compiles;
  prometheus::Counter& grammar_compile_seconds;
  prometheus::Counter& grammar_compile_refusals;
  prometheus::Counter& grammar_compile_cache_hits;

  // Histograms (seconds).
  prometheus::Histogram& time_to_first_token;
  prometheus::Histogram& inter_token_latency;
  prometheus::Histogram& queue_time;
  prometheus::Histogram& e2e_latency;
  prometheus::Histogram& step_duration;

  // Labelled families.
  // Steps per replica. Label values are replica names the registry validated
  // (CheckReplicaName); a replica that left keeps its series (so sums over replicas do not
  // drop) until more than kDepartedReplicasKept others left after it: the label set stays
  // bounded under a Deployment whose pods get new names. Planning thread only.
  static constexpr size_t kDepartedReplicasKept = 64;
  prometheus::Counter& Steps(const std::string& replica);
  void ReplicaGone(const std::string& replica);
  prometheus::Counter& Finished(const std::string& reason);
  prometheus::Counter& ByStatus(const std::string& code);
  prometheus::Counter& Fenced(const std::string& reason);
  // OpenAI HTTP API responses by HTTP status (499: the client left first).
  prometheus::Counter& HttpResponses(int status);
  // Per tenant (names from the tokens file only, or "default"): calls admitted, and
  // calls refused by a tenant limit (reason: priority, streams, tokens_per_minute).
  prometheus::Counter& TenantAdmitted(const std::string& tenant);
  prometheus::Counter& TenantRejected(const std::string& tenant, const std::string& reason);
  // Tokens-file reloads that failed (file deleted, unreadable, or not parsing): the
  // scheduler then accepts no token until a good version loads.
  prometheus::Counter& auth_reload_failures;

 private:
  ServiceMetrics(std::shared_ptr<prometheus::Registry> registry, const prometheus::Labels& labels);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Labels constant_labels_;
  prometheus::Family<prometheus::Counter>& steps_family_;
  std::deque<std::string> departed_replicas_;  // oldest first
  prometheus::Family<prometheus::Counter>& finished_family_;
  prometheus::Family<prometheus::Counter>& status_family_;
  prometheus::Family<prometheus::Counter>& fenced_family_;
  prometheus::Family<prometheus::Counter>& http_responses_family_;
  prometheus::Family<prometheus::Counter>& tenant_admitted_family_;
  prometheus::Family<prometheus::Counter>& tenant_rejected_family_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_METRICS_H_
