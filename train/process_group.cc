#include "train/process_group.h"

#include <cstdlib>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/node_address.h"
#include "train/torch_error.h"

namespace frameworm {

std::vector<std::string> AvailableBackends() {
  std::vector<std::string> out = {"gloo"};
  if (NcclCompiledIn()) out.push_back("nccl");
  return out;
}

std::string DefaultBackend() {
  return (NcclCompiledIn() && torch::cuda::is_available()) ? "nccl" : "gloo";
}

absl::Status PinNcclSocketInterface(const std::string& master_addr) {
  const char* set = std::getenv("NCCL_SOCKET_IFNAME");
  if (set != nullptr && *set != '\0') return absl::OkStatus();
  absl::StatusOr<std::string> local = AddressToward(master_addr);
  if (!local.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "nccl: no local address faces MASTER_ADDR ", master_addr, ": ",
        local.status().message(), "; set NCCL_SOCKET_IFNAME to choose one"));
  }
  absl::StatusOr<std::string> ifname = InterfaceOf(*local);
  if (!ifname.ok()) return absl::UnavailableError(ifname.status().message());
  // "=" makes NCCL match the name exactly (not as a prefix).
  setenv("NCCL_SOCKET_IFNAME", absl::StrCat("=", *ifname).c_str(), 1);
  return absl::OkStatus();
}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateProcessGroup(
    const ProcessGroupOptions& o) {
  const std::string available = absl::StrJoin(AvailableBackends(), ", ");
  if (o.backend == "mpi") {
    return absl::UnimplementedError(absl::StrCat(
        "backend \"mpi\" is not available: this LibTorch was built without "
        "MPI; available backends: ",
        available));
  }
  if (o.backend != "gloo" && o.backend != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown backend \"", o.backend, "\"; available backends: ",
        available));
  }
  if (o.backend == "nccl" && !NcclCompiledIn()) {
    return absl::UnimplementedError(absl::StrCat(
        "backend \"nccl\" was not compiled into this build (no CUDA/NCCL "
        "headers); available backends: ",
        available));
  }
  if (o.backend == "nccl" && !torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        "backend \"nccl\" needs CUDA, but no CUDA device is available; use "
        "backend \"gloo\"");
  }
  if (o.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be >= 1, got ", o.world_size));
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", o.rank, " outside [0, ", o.world_size, ")"));
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("master_port ", o.master_port, " outside [1, 65535]"));
  }
  c10::intrusive_ptr<c10d::Store> store;
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(o.master_port);
    so.isServer = o.rank == 0;
    so.numWorkers = o.world_size;
    so.waitWorkers = true;
    so.timeout = o.timeout;
    store = c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "rendezvous at ", o.master_addr, ":", o.master_port, " (rank ",
        o.rank, "/", o.world_size, ") failed: ", TorchMessage(e)));
  }
  if (o.backend == "nccl") {
    absl::Status pinned = PinNcclSocketInterface(o.master_addr);
    if (!pinned.ok()) return pinned;
    return CreateNcclBackend(store, o);
  }
  return CreateGlooBackend(store, o);
}

}  // namespace frameworm
