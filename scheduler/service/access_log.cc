#include "scheduler/service/access_log.h"

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace weft {
namespace {

std::string Millis(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "-";
  return absl::StrCat(absl::ToInt64Microseconds(d) / 1000.0);
}

}  // namespace

std::string FormatAccessLine(const AccessRecord& r) {
  return absl::StrCat("access id=", r.who.request_id, " tenant=", r.who.tenant,
                      " model=", r.who.model, " status=", absl::StatusCodeToString(r.code),
                      " prompt_tokens=", r.prompt_tokens,
                      " completion_tokens=", r.completion_tokens, " ttft_ms=", Millis(r.ttft),
                      " duration_ms=", Millis(r.duration));
}

void LogAccess(const AccessRecord& record) {
  LOG(INFO) << FormatAccessLine(record);
  if (record.who.on_end) record.who.on_end(record);
}

}  // namespace weft
