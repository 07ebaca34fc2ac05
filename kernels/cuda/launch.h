// Programmatic dependent launch (PDL, compute capability 9.0+): whether the decode-path
// kernels of this directory are launched with the attribute
// cudaLaunchAttributeProgrammaticStreamSerialization, so that a kernel's CTAs may start
// (launch, prologue, loads of constant weights) while the kernel before it in the stream
// still runs. Each such kernel calls PdlBegin() (device_utils.cuh: griddepcontrol.wait,
// which returns once the previous grid has completed and its writes are visible, then
// griddepcontrol.launch_dependents, so at most one grid waits ahead) before it touches
// anything a previous kernel wrote or reads. A kernel launched without the attribute
// passes PdlBegin at once; kernels that do not call it are never launched with it. Inside
// a stream capture the attribute becomes a programmatic edge of the graph.
// The choice is per host thread and scoped (the CUDA backend sets it around each forward
// pass it queues), so two backends in one process may differ; it is read at launch time,
// and a captured graph keeps what its capture saw.
// Thread-safety: thread-local state.
#ifndef WEFT_KERNELS_CUDA_LAUNCH_H_
#define WEFT_KERNELS_CUDA_LAUNCH_H_

namespace weft::kernels::cuda {

// Whether this thread's PDL-aware launches carry the attribute now (default false).
bool ProgrammaticLaunch();

// Sets this thread's choice for its lifetime; restores the previous one when destroyed.
class ScopedProgrammaticLaunch {
 public:
  explicit ScopedProgrammaticLaunch(bool on);
  ~ScopedProgrammaticLaunch();
  ScopedProgrammaticLaunch(const ScopedProgrammaticLaunch&) = delete;
  ScopedProgrammaticLaunch& operator=(const ScopedProgrammaticLaunch&) = delete;

 private:
  bool previous_;
};

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_LAUNCH_H_
