#include "kernels/cuda/launch.h"

namespace weft::kernels::cuda {
namespace {
thread_local bool programmatic_launch = false;
}  // namespace

bool ProgrammaticLaunch() { return programmatic_launch; }

ScopedProgrammaticLaunch::ScopedProgrammaticLaunch(bool on) : previous_(programmatic_launch) {
  programmatic_launch = on;
}

ScopedProgrammaticLaunch::~ScopedProgrammaticLaunch() { programmatic_launch = previous_; }

}  // namespace weft::kernels::cuda
