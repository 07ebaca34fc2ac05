#include "scheduler/edge/bearer_tokens.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace weft {
namespace {

class BearerTokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tokens-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(::system(absl::StrCat("mkdir -p ", dir_).c_str()), 0);
    path_ = dir_ + "/tokens";
  }
  void Write(const std::string& text, const std::string& path = "") {
    std::ofstream(path.empty() ? path_ : path, std::ios::trunc) << text;
  }
  std::unique_ptr<BearerTokens> Load() {
    BearerTokens::Options o;
    o.path = path_;
    o.recheck_interval = absl::ZeroDuration();  // every Check looks at the file
    auto t = BearerTokens::Load(o);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }

  std::string dir_, path_;
};

TEST_F(BearerTokensTest, ParsesOneTokenALineSkippingBlanksAndComments) {
  Write("# team A\n  alpha-123  \n\n#beta-456\r\ngamma/+=\r\n");
  auto t = Load();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->num_tokens(), 2u);
  EXPECT_TRUE(t->Check("Bearer alpha-123").ok());
  EXPECT_TRUE(t->Check("bearer gamma/+=").ok());  // the scheme is case-insensitive
  EXPECT_TRUE(t->Check("BEARER   alpha-123 ").ok());
  EXPECT_EQ(t->Check("Bearer beta-456").code(), absl::StatusCode::kUnauthenticated);  // comment
}

TEST_F(BearerTokensTest, RefusesWithoutEchoingTheToken) {
  Write("s3cret\n");
  auto t = Load();
  ASSERT_NE(t, nullptr);
  for (const char* bad : {"", "s3cret", "Basic s3cret", "Bearer", "Bearer ", "Bearer s3cre",
                          "Bearer s3cret2", "Bearer wrong-token-value"}) {
    absl::Status s = t->Check(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << "'" << bad << "'";
    EXPECT_FALSE(absl::StrContains(s.message(), "s3cre")) << s.message();
    EXPECT_FALSE(absl::StrContains(s.message(), "wrong-token")) << s.message();
  }
  EXPECT_TRUE(absl::StrContains(t->Check("").message(), "missing"));
  EXPECT_TRUE(absl::StrContains(t->Check("Basic abc").message(), "not a bearer token"));
  EXPECT_EQ(t->Check("Bearer nope").message(), "invalid bearer token");
}

TEST_F(BearerTokensTest, ABadFileIsRefusedNamingTheLineNotItsContent) {
  Write("good\nbad tok3n-xyz\n");
  BearerTokens::Options o;
  o.path = path_;
  auto t = BearerTokens::Load(o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "line 2")) << t.status();
  EXPECT_FALSE(absl::StrContains(t.status().message(), "tok3n")) << t.status();
  o.path = dir_ + "/missing";
  EXPECT_EQ(BearerTokens::Load(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.path = "";
  EXPECT_FALSE(BearerTokens::Load(o).ok());
}

TEST_F(BearerTokensTest, ReloadsWhenTheFileChanges) {
  Write("one\n");
  auto t = Load();
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->Check("Bearer two").ok());
  Write("one\ntwo\n");  // a token added in place
  EXPECT_TRUE(t->Check("Bearer two").ok());
  EXPECT_EQ(t->reloads(), 1);
  Write("two\n");  // one removed
  EXPECT_FALSE(t->Check("Bearer one").ok());
  EXPECT_TRUE(t->Check("Bearer two").ok());
  // Replaced by rename (as editors and Kubernetes Secret volumes do).
  Write("three\n", dir_ + "/next");
  ASSERT_EQ(::rename((dir_ + "/next").c_str(), path_.c_str()), 0);
  EXPECT_TRUE(t->Check("Bearer three").ok());
  EXPECT_FALSE(t->Check("Bearer two").ok());
  // A broken version fails closed (no token accepted) until a good one comes; so does
  // a deleted file (before, both left the old tokens valid). Each failure counts once.
  Write("three\nbad token\n");
  EXPECT_FALSE(t->Check("Bearer three").ok());
  EXPECT_EQ(t->failed_reloads(), 1);
  EXPECT_FALSE(t->Check("Bearer three").ok());
  EXPECT_EQ(t->failed_reloads(), 1);
  Write("three\n");
  EXPECT_TRUE(t->Check("Bearer three").ok());
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  EXPECT_FALSE(t->Check("Bearer three").ok());
  EXPECT_EQ(t->failed_reloads(), 2);
  Write("four\n");
  EXPECT_TRUE(t->Check("Bearer four").ok());
  EXPECT_FALSE(t->Check("Bearer three").ok());
  // Empty: every call refused.
  Write("# nobody\n");
  EXPECT_FALSE(t->Check("Bearer four").ok());
  EXPECT_EQ(t->num_tokens(), 0u);
}

TEST_F(BearerTokensTest, RechecksTheFileAtMostOncePerInterval) {
  Write("one\n");
  BearerTokens::Options o;
  o.path = path_;
  o.recheck_interval = absl::Hours(1);
  auto t = BearerTokens::Load(o);
  ASSERT_TRUE(t.ok());
  Write("one\ntwo\n");
  EXPECT_FALSE((*t)->Check("Bearer two").ok());  // not looked at again yet
  EXPECT_EQ((*t)->reloads(), 0);
}

TEST_F(BearerTokensTest, ConcurrentChecksDuringReloads) {
  Write("a\n");
  auto t = Load();
  ASSERT_NE(t, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> refused_a{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 2000; ++j) {
        if (!t->Check("Bearer a").ok()) ++refused_a;
      }
    });
  }
  // Each version replaces the file whole (write + rename), as the header asks.
  for (int j = 0; j < 50; ++j) {
    Write(j % 2 == 0 ? "a\nb\n" : "a\n", dir_ + "/next");
    ASSERT_EQ(::rename((dir_ + "/next").c_str(), path_.c_str()), 0);
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused_a.load(), 0);  // "a" was in every version
}

TEST_F(BearerTokensTest, TokensMapToTenantsWithLimitsAndTheOldFormatIsTheDefaultTenant) {
  Write("plain-1\n"
        "a-1 tenant=team-a max_streams=2 max_priority=5 tokens_per_minute=1000\n"
        "a-2 tenant=team-a\n"
        "b-1 tenant=team.b max_priority=-1\n");
  auto t = Load();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->num_tokens(), 4u);
  auto plain = t->Resolve("Bearer plain-1");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->name, "default");
  EXPECT_FALSE((*plain)->max_priority.has_value());
  EXPECT_EQ((*plain)->max_streams, 0);
  for (const char* token : {"Bearer a-1", "Bearer a-2"}) {
    auto a = t->Resolve(token);
    ASSERT_TRUE(a.ok()) << token;
    EXPECT_EQ((*a)->name, "team-a");
    EXPECT_EQ((*a)->max_streams, 2);
    EXPECT_EQ((*a)->max_priority, 5);
    EXPECT_EQ((*a)->tokens_per_minute, 1000);
  }
  EXPECT_EQ((*t->Resolve("Bearer b-1"))->max_priority, -1);
  EXPECT_EQ(t->Resolve("Bearer a-3").status().code(), absl::StatusCode::kUnauthenticated);
  // Bad fields name the line and the key, never the token.
  for (const char* bad : {"sekr1t tenant=a b\n", "sekr1t tenant=\n", "sekr1t max_streams=0\n",
                          "sekr1t max_priority=x\n", "sekr1t colour=red\n",
                          "sekr1t tenant=a max_streams=1\nsekr2t tenant=a max_streams=2\n",
                          "sekr1t tenant=a{b}\n"}) {
    auto p = BearerTokens::Parse(bad);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(absl::StrContains(p.status().message(), "sekr")) << p.status();
  }
}

}  // namespace
}  // namespace weft
