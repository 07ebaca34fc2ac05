#include "common/metrics_http.h"

#include <httplib.h>

#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/build_info.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"

namespace weft {
namespace {

struct Reply {
  int status = -1;
  std::string body;
};

Reply Get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(5, 0);
  auto r = c.Get(path.c_str());
  if (!r) return Reply{};
  return Reply{r->status, r->body};
}

TEST(MetricsHttpTest, ServesMetricsAndProbes) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("weft_test_total").Help("A test counter.").Register(*registry)
      .Add({{"k", "v"}}).Increment(3);
  std::atomic<bool> started{false}, ready{false};
  MetricsHttpOptions o;
  o.host = "127.0.0.1";
  o.registry = registry;
  o.constant_labels = {{"model", "m"}};
  o.started = [&] { return started.load(); };
  o.ready = [&] { return ready.load(); };
  auto http = MetricsHttp::Start(o);
  ASSERT_TRUE(http.ok()) << http.status();
  const int port = (*http)->port();
  ASSERT_GT(port, 0);

  EXPECT_EQ(Get(port, "/livez").status, 200);
  EXPECT_EQ(Get(port, "/startupz").status, 503);
  EXPECT_EQ(Get(port, "/readyz").status, 503);
  started = true;
  EXPECT_EQ(Get(port, "/startupz").status, 200);
  EXPECT_EQ(Get(port, "/readyz").status, 503);
  ready = true;
  EXPECT_EQ(Get(port, "/readyz").status, 200);
  const Reply m = Get(port, "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("# TYPE weft_test_total counter"), std::string::npos) << m.body;
  EXPECT_NE(m.body.find("weft_test_total{k=\"v\"} 3"), std::string::npos) << m.body;
  // Every endpoint says which build serves it, the same identity as --version.
  EXPECT_NE(m.body.find(absl::StrCat("weft_build_info{model=\"m\",revision=\"", BuildRevision(),
                                     "\",version=\"", BuildVersion(), "\"} 1")),
            std::string::npos) << m.body;
  EXPECT_EQ(Get(port, "/nothing").status, 404);

  // The port is taken while this server runs.
  MetricsHttpOptions same = o;
  same.port = port;
  auto clash = MetricsHttp::Start(same);
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kUnavailable);
  http->reset();  // stops and joins
  EXPECT_EQ(Get(port, "/livez").status, -1) << "nothing listens after the destructor";
}

TEST(MetricsHttpTest, ReadyDefaultsToStartedAndBothDefaultToTrue) {
  auto registry = std::make_shared<prometheus::Registry>();
  MetricsHttpOptions o;
  o.host = "127.0.0.1";
  o.registry = registry;
  auto always = MetricsHttp::Start(o);
  ASSERT_TRUE(always.ok()) << always.status();
  EXPECT_EQ(Get((*always)->port(), "/startupz").status, 200);
  EXPECT_EQ(Get((*always)->port(), "/readyz").status, 200);

  std::atomic<bool> started{false};
  o.started = [&] { return started.load(); };
  auto follows = MetricsHttp::Start(o);
  ASSERT_TRUE(follows.ok()) << follows.status();
  EXPECT_EQ(Get((*follows)->port(), "/readyz").status, 503);
  started = true;
  EXPECT_EQ(Get((*follows)->port(), "/readyz").status, 200);
}

TEST(MetricsHttpTest, RejectsBadOptions) {
  MetricsHttpOptions o;
  EXPECT_EQ(MetricsHttp::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.registry = std::make_shared<prometheus::Registry>();
  o.max_connections = 0;
  EXPECT_EQ(MetricsHttp::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weft
