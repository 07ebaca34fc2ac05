// Comparisons (per-pair ratios and their median), the table, the JSON document's shape,
// and the gnuplot script / PNG.
#include "tools/bench/report.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tools/bench/plot.h"

namespace weft {
namespace bench {
namespace {

RunResult MakeRun(int32_t target, const std::string& label, int32_t pair, double tok_s,
                  double ttft_p99) {
  RunResult r;
  r.target = label;
  r.target_index = target;
  r.level_index = 0;
  r.level = {LoadMode::kClosed, 16};
  r.pair = pair;
  r.summary.num_requests = 10;
  r.summary.num_ok = 10;
  r.summary.output_tok_s = tok_s;
  r.summary.req_s = tok_s / 100;
  r.summary.ttft_s.p50 = ttft_p99 / 2;
  r.summary.ttft_s.p99 = ttft_p99;
  r.summary.itl_s.p50 = r.summary.itl_s.p99 = 0.01;
  r.summary.e2e_s.p50 = r.summary.e2e_s.p99 = 1;
  r.samples.ttft_s = {ttft_p99 / 2, ttft_p99};
  r.samples.itl_s = {0, 0.01, 0.02};
  r.samples.e2e_s = {1};
  return r;
}

std::vector<RunResult> ThreePairs() {
  // A: 1000, 1100, 900 tok/s; B: 100, 100, 50 -> ratios 10, 11, 18 -> median 11.
  return {MakeRun(0, "weft", 0, 1000, 0.1), MakeRun(1, "llama", 0, 100, 1.0),
          MakeRun(0, "weft", 1, 1100, 0.1), MakeRun(1, "llama", 1, 100, 2.0),
          MakeRun(0, "weft", 2, 900, 0.1),  MakeRun(1, "llama", 2, 50, 4.0)};
}

TEST(CompareTest, MedianOfPerPairRatios) {
  const auto runs = ThreePairs();
  const std::vector<std::string> targets = {"weft", "llama"};
  const std::vector<Comparison> c = CompareLevel(runs, 0, targets);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].numerator, "weft");
  EXPECT_EQ(c[0].denominator, "llama");
  ASSERT_EQ(c[0].ratios[0].metric, "output_tok_s");
  EXPECT_EQ(c[0].ratios[0].per_pair, (std::vector<double>{10, 11, 18}));
  EXPECT_DOUBLE_EQ(c[0].ratios[0].median, 11);
  EXPECT_EQ(c[0].ratios[3].metric, "ttft_p99_s");
  EXPECT_DOUBLE_EQ(c[0].ratios[3].median, 0.05);  // 0.1, 0.05, 0.025
  EXPECT_TRUE(CompareLevel(runs, 0, std::vector<std::string>{"weft"}).empty());
}

TEST(TableTest, RowsMediansWarningsAndRatios) {
  auto runs = ThreePairs();
  runs[1].summary.num_failed = 2;
  runs[1].summary.errors["UNAVAILABLE: down"] = 2;
  const std::vector<std::string> targets = {"weft", "llama"};
  std::ostringstream out;
  PrintLevelTable(out, "c=16 | test", runs, 0, CompareLevel(runs, 0, targets));
  const std::string s = out.str();
  EXPECT_NE(s.find("== c=16 | test =="), std::string::npos) << s;
  EXPECT_NE(s.find("TTFT p99"), std::string::npos);
  EXPECT_NE(s.find("1100.0"), std::string::npos) << s;
  EXPECT_NE(s.find(" med "), std::string::npos) << s;
  EXPECT_NE(s.find("2 of 10 requests FAILED"), std::string::npos) << s;
  EXPECT_NE(s.find("2x UNAVAILABLE: down"), std::string::npos) << s;
  EXPECT_NE(s.find("weft / llama, median of 3 per-pair ratios"), std::string::npos) << s;
  EXPECT_NE(s.find("[10 11 18]"), std::string::npos) << s;
}

TEST(FormatSecondsTest, Units) {
  EXPECT_EQ(FormatSeconds(0.00042), "420us");
  EXPECT_EQ(FormatSeconds(0), "0us");
  EXPECT_EQ(FormatRatio(0.0 / 0.0), "-");
  EXPECT_EQ(FormatRatio(12.345), "12.3");
  EXPECT_EQ(FormatSeconds(0.0123), "12.3ms");
  EXPECT_EQ(FormatSeconds(1.25), "1.25s");
  EXPECT_EQ(FormatSeconds(std::nan("")), "-");
}

TEST(JsonTest, Shape) {
  auto runs = ThreePairs();
  RequestRecord rec;
  rec.index = 3;
  rec.send_ns = 1000;
  rec.AddTokens(2000, 1);
  rec.AddTokens(5000, 2);
  rec.end_ns = 6000;
  rec.status = absl::DeadlineExceededError("late");
  runs[0].records = {rec};
  runs[0].summary.ttft_s.mean = std::nan("");
  const std::vector<std::string> targets = {"weft", "llama"};
  const nlohmann::json config = {{"seed", 1}};
  const nlohmann::json doc =
      ReportToJson(config, runs, CompareLevel(runs, 0, targets), /*per_request=*/true);
  EXPECT_EQ(doc["tool"], "weft-bench");
  EXPECT_EQ(doc["config"]["seed"], 1);
  ASSERT_EQ(doc["runs"].size(), 6u);
  const nlohmann::json& r0 = doc["runs"][0];
  EXPECT_EQ(r0["target"], "weft");
  EXPECT_EQ(r0["mode"], "closed");
  EXPECT_EQ(r0["level"], 16);
  EXPECT_EQ(r0["level_label"], "c=16");
  for (const char* k : {"num_requests", "num_ok", "num_failed", "num_short", "output_tokens",
                        "wall_s", "output_tok_s", "req_s", "ttft_s", "itl_s", "e2e_s", "errors"}) {
    EXPECT_TRUE(r0["summary"].contains(k)) << k;
  }
  EXPECT_TRUE(r0["summary"]["ttft_s"]["mean"].is_null());  // NaN is written as null
  EXPECT_EQ(r0["summary"]["ttft_s"]["p99"], 0.1);
  ASSERT_EQ(r0["requests"].size(), 1u);
  const nlohmann::json& q = r0["requests"][0];
  EXPECT_EQ(q["index"], 3);
  EXPECT_EQ(q["output_tokens"], 3);
  EXPECT_EQ(q["ok"], false);
  EXPECT_NE(q["error"].get<std::string>().find("late"), std::string::npos);
  ASSERT_EQ(q["arrivals"].size(), 2u);
  EXPECT_EQ(q["arrivals"][1][1], 2);
  EXPECT_TRUE(doc["runs"][1]["requests"].empty());  // no records kept for that run
  ASSERT_EQ(doc["comparisons"].size(), 1u);
  EXPECT_EQ(doc["comparisons"][0]["ratios"]["output_tok_s"]["median"], 11);
  EXPECT_EQ(doc["comparisons"][0]["ratios"]["output_tok_s"]["per_pair"].size(), 3u);
  const nlohmann::json no_records = ReportToJson(config, runs, {}, /*per_request=*/false);
  EXPECT_FALSE(no_records["runs"][0].contains("requests"));
}

TEST(PlotTest, ScriptHasDataBlocksForEveryPanel) {
  const auto runs = ThreePairs();
  const std::vector<std::string> targets = {"weft", "llama's"};
  const std::vector<LoadLevel> levels = {{LoadMode::kClosed, 16}};
  const std::string s = BuildGnuplotScript(runs, targets, levels, "title", "/tmp/x.png");
  for (const char* want : {"$tput0 << EOD", "$tput1 << EOD", "$tpairs0 << EOD",
                           "$cdf_ttft_0_0 << EOD", "$cdf_itl_1_0 << EOD", "$cdf_e2e_0_0 << EOD",
                           "set output '/tmp/x.png'", "set multiplot layout 2,2",
                           "'llama''s c=16'", "pngcairo"}) {
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
  }
  // Zero inter-token gaps are drawn at 1 us on the log axis.
  EXPECT_NE(s.find("1e-06 0.333333"), std::string::npos) << s;
}

TEST(PlotTest, RendersAPngWhenGnuplotIsInstalled) {
  if (FindOnPath("gnuplot").empty()) GTEST_SKIP() << "gnuplot not installed";
  const auto runs = ThreePairs();
  const std::vector<std::string> targets = {"weft", "llama"};
  const std::vector<LoadLevel> levels = {{LoadMode::kClosed, 16}};
  const std::string png = std::string(std::getenv("TEST_TMPDIR")) + "/plot.png";
  const absl::Status s = RenderPlot(runs, targets, levels, "test", png);
  ASSERT_TRUE(s.ok()) << s;
  std::ifstream f(png, std::ios::binary);
  char magic[8] = {0};
  f.read(magic, 8);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
}

}  // namespace
}  // namespace bench
}  // namespace weft
