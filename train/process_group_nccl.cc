// The NCCL backend: compiled only when CUDA and NCCL headers were found
// (FRAMEWORM_HAVE_NCCL); otherwise the stubs at the bottom are used.
#include "train/process_group.h"

#include "absl/strings/str_cat.h"
#include "train/torch_error.h"

#ifdef FRAMEWORM_HAVE_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace frameworm {

#ifdef FRAMEWORM_HAVE_NCCL
bool NcclCompiledIn() { return true; }

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateNcclBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    const ProcessGroupOptions& o) {
  try {
    const int ndev = c10::cuda::device_count();
    if (ndev <= 0) {
      return absl::FailedPreconditionError(
          "backend \"nccl\" needs CUDA, but no CUDA device is visible");
    }
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(o.local_rank % ndev));
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = o.timeout;
    return c10::intrusive_ptr<c10d::Backend>(
        c10::make_intrusive<c10d::ProcessGroupNCCL>(store, o.rank,
                                                    o.world_size, opts));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "creating the nccl process group (rank ", o.rank, "/", o.world_size,
        ") failed: ", TorchMessage(e)));
  }
}
#else
bool NcclCompiledIn() { return false; }

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateNcclBackend(
    const c10::intrusive_ptr<c10d::Store>&, const ProcessGroupOptions&) {
  return absl::UnimplementedError(
      "backend \"nccl\" was not compiled into this build");
}
#endif

}  // namespace frameworm
