// MetricsHttp: a process's small HTTP endpoint for operators — Prometheus /metrics and
// the Kubernetes probes — served by cpp-httplib on `host:port` (port 0 = ephemeral; the
// bound port is logged and returned by port()).
//
//   GET /metrics   the registry in Prometheus text format 0.0.4 (prometheus-cpp's
//                  serializer), always 200; every process's endpoint adds
//                  weft_build_info{version, revision} 1 (common/build_info.h)
//   GET /livez     200 "ok" for as long as the process runs: start the server first
//                  thing, so liveness never kills a process that is still loading
//   GET /startupz  200 once `started()` holds, else 503
//   GET /readyz    200 while `ready()` holds, else 503
//   anything else  404
// What `started` and `ready` mean is the binary's (weft-worker: model loaded and KV pool
// allocated / admitted to a replica that does not drain; weft-scheduler: serving / a
// replica that does not drain is admitted and the scheduler does not drain).
//
// Why not prometheus-cpp's civetweb exposer: Debian's civetweb starts its threads with
// a fixed 100 KiB stack, and glibc puts every loaded library's static thread-local
// storage on each thread's stack — 154 KB in the --config=cuda worker (cuBLASLt alone
// 94 KB), so pthread_create failed and the worker exited at start. cpp-httplib's
// threads use the default stack size (RLIMIT_STACK, 8 MiB here).
//
// Slow and hostile clients (the kubelet probes this port): it is a GatedHttpServer
// (common/http_gate.h): threads are started per connection up to `max_connections`
// (more are answered 503 at once), a request's head and body must arrive within
// `request_timeout` (408) and within 16 KiB / 64 header fields (431), bodies are not
// read (no route takes one; 413 past 64 KiB). So clients trickling bytes hold a thread
// each for at most `request_timeout` and never hold up /livez while threads remain:
// before, a fixed pool of 4 threads was held by 4 trickling connections for as long as
// they trickled.
//
// Ownership: owns the server and its threads; the destructor stops and joins them.
// Thread-safety: the callbacks and the registry are read from the server's threads:
// they must be thread-safe (prometheus-cpp metrics are; use atomics in callbacks).
#ifndef WEFT_COMMON_METRICS_HTTP_H_
#define WEFT_COMMON_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

#include "absl/time/time.h"

namespace weft {

class GatedHttpServer;

struct MetricsHttpOptions {
  std::string host = "0.0.0.0";
  int port = 0;  // 0: any free port
  std::shared_ptr<prometheus::Registry> registry;  // required
  // Labels weft_build_info carries besides version and revision: those every series of
  // `registry` carries (the scheduler's model="<served name>").
  prometheus::Labels constant_labels;
  std::function<bool()> started;  // /startupz; null: always started
  std::function<bool()> ready;    // /readyz; null: ready once started
  int max_connections = 64;       // served at once, one thread each (started on demand)
  absl::Duration request_timeout = absl::Seconds(5);  // head + body

  absl::Status Validate() const;
};

class MetricsHttp {
 public:
  // Binds and starts serving. UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttp>> Start(MetricsHttpOptions options);
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  int port() const { return port_; }

 private:
  explicit MetricsHttp(MetricsHttpOptions options);

  const MetricsHttpOptions options_;
  std::unique_ptr<GatedHttpServer> server_;
  std::thread listener_;
  int port_ = 0;
};

}  // namespace weft

#endif  // WEFT_COMMON_METRICS_HTTP_H_
