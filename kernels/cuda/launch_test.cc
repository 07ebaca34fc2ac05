// The programmatic-launch choice is per thread and scoped (launch.h); no device needed.
#include "kernels/cuda/launch.h"

#include <thread>

#include "gtest/gtest.h"

namespace weft::kernels::cuda {
namespace {

TEST(LaunchTest, ScopedChoiceNestsAndRestores) {
  EXPECT_FALSE(ProgrammaticLaunch());
  {
    const ScopedProgrammaticLaunch on(true);
    EXPECT_TRUE(ProgrammaticLaunch());
    {
      const ScopedProgrammaticLaunch off(false);
      EXPECT_FALSE(ProgrammaticLaunch());
    }
    EXPECT_TRUE(ProgrammaticLaunch());
  }
  EXPECT_FALSE(ProgrammaticLaunch());
}

TEST(LaunchTest, ChoiceIsPerThread) {
  const ScopedProgrammaticLaunch on(true);
  bool other = true;
  std::thread t([&] { other = ProgrammaticLaunch(); });
  t.join();
  EXPECT_FALSE(other) << "another thread (another backend's step thread) keeps its own";
  EXPECT_TRUE(ProgrammaticLaunch());
}

}  // namespace
}  // namespace weft::kernels::cuda
