// AccessLog: one line per generation call, the same for gRPC Generate and the OpenAI
// HTTP API, written to glog INFO as
//   access id=<request id> tenant=<t> model=<m> status=<gRPC code name> prompt_tokens=N
//          completion_tokens=N ttft_ms=<ms or -> duration_ms=<ms>
// Never the prompt, the text or the token: only the request id (validated by
// GenerateFrontend::RequestId: bounded, a safe charset), the tenant's name (from the
// tokens file), the served model's name, counts and times.
// Thread-safety: the functions are safe from any thread.
#ifndef WEFT_SCHEDULER_SERVICE_ACCESS_LOG_H_
#define WEFT_SCHEDULER_SERVICE_ACCESS_LOG_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace weft {

struct AccessRecord;

// Who a call is, for its access-log line; carried from the edge to the end of the call.
struct AccessIdentity {
  std::string request_id;
  std::string tenant;
  std::string model;
  // Runs with the call's record when its line is written, on the writing thread (the
  // planning thread for admitted calls): the tenant's tokens-per-minute refund. Must not
  // block.
  std::function<void(const AccessRecord&)> on_end;
};

struct AccessRecord {
  AccessIdentity who;
  absl::StatusCode code = absl::StatusCode::kOk;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  absl::Duration ttft = absl::InfiniteDuration();  // infinite: no token
  absl::Duration duration;
};

std::string FormatAccessLine(const AccessRecord& record);
// Writes the line and runs record.who.on_end. Every call that reached the edge gets
// exactly one, whatever ended it (refused, finished, cancelled, the server stopping).
void LogAccess(const AccessRecord& record);

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_ACCESS_LOG_H_
