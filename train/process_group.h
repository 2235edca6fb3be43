// Creation of c10d process groups (backends) for the training library.
//
// CreateProcessGroup() builds a TCPStore rendezvous (rank 0 is the server
// at master_port) and a c10d backend on top of it: Gloo (always compiled)
// or NCCL (compiled only when CUDA and NCCL headers were found at build
// time). "mpi" is refused: this LibTorch has no MPI backend.
//
// Thread safety: free functions, safe to call from any thread. The
// returned backend follows c10d's rules (collectives issued from one
// thread, in the same order on every rank).
#ifndef FRAMEWORM_TRAIN_PROCESS_GROUP_H_
#define FRAMEWORM_TRAIN_PROCESS_GROUP_H_

#include <chrono>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "absl/status/statusor.h"

namespace frameworm {

struct ProcessGroupOptions {
  std::string backend = "gloo";  // "gloo" | "nccl" | "mpi"
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // selects the CUDA device for NCCL
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// Backends this build can create, e.g. {"gloo"} or {"gloo", "nccl"}.
std::vector<std::string> AvailableBackends();

// "nccl" when CUDA is available at run time, else "gloo".
std::string DefaultBackend();

// Errors: INVALID_ARGUMENT for an unknown backend, a rank outside
// [0, world_size) or a bad port; UNIMPLEMENTED for "mpi" (names the
// available backends); FAILED_PRECONDITION for "nccl" without CUDA;
// UNAVAILABLE when the rendezvous or connection fails or times out.
absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateProcessGroup(
    const ProcessGroupOptions& options);

// For NCCL's bootstrap: unless NCCL_SOCKET_IFNAME is set already, sets it to
// the interface whose address routes to `master_addr` (exact match, "=eth0"),
// so NCCL does not pick an interface the peers cannot reach. Unavailable
// (naming the address) when no local address faces `master_addr`.
absl::Status PinNcclSocketInterface(const std::string& master_addr);

// Internal: the per-backend factories (separate translation units).
absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateGlooBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    const ProcessGroupOptions& options);
absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateNcclBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    const ProcessGroupOptions& options);
bool NcclCompiledIn();

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_PROCESS_GROUP_H_
