#include "scheduler/policy.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

using ::testing::ElementsAre;

TEST(PolicyTest, NamesRoundTrip) {
  for (PolicyKind k : {PolicyKind::kDecodeFirst, PolicyKind::kPrefillFirst, PolicyKind::kStatic}) {
    auto parsed = ParsePolicyKind(PolicyKindName(k));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, k);
    EXPECT_EQ(MakePolicy(k)->kind(), k);
  }
  EXPECT_THAT(ParsePolicyKind("fifo").status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PolicyTest, DecodeFirstRunsDecodesBeforePrefillsBeforeAdmissions) {
  auto p = MakePolicy(PolicyKind::kDecodeFirst);
  EXPECT_THAT(p->passes(), ElementsAre(PlanPass::kRunningDecodes, PlanPass::kRunningPrefills,
                                       PlanPass::kWaiting));
  EXPECT_TRUE(p->MayAdmit(100));
  EXPECT_FALSE(p->AdmitsWithoutBudget());
  EXPECT_EQ(p->TokensToHold(40, 1000), 40);  // on demand
}

TEST(PolicyTest, PrefillFirstRunsPrefillsAndAdmissionsBeforeDecodes) {
  auto p = MakePolicy(PolicyKind::kPrefillFirst);
  EXPECT_THAT(p->passes(), ElementsAre(PlanPass::kRunningPrefills, PlanPass::kWaiting,
                                       PlanPass::kRunningDecodes));
  EXPECT_TRUE(p->MayAdmit(100));
  EXPECT_EQ(p->TokensToHold(40, 1000), 40);
}

TEST(PolicyTest, StaticAdmitsOnlyWhenIdleAndReservesEverything) {
  auto p = MakePolicy(PolicyKind::kStatic);
  EXPECT_TRUE(p->MayAdmit(0));
  EXPECT_FALSE(p->MayAdmit(1));
  EXPECT_TRUE(p->AdmitsWithoutBudget());
  EXPECT_EQ(p->TokensToHold(40, 1000), 1000);
  EXPECT_EQ(p->TokensToHold(0, 1000), 1000);
}

}  // namespace
}  // namespace weft
