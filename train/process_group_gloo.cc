// The Gloo backend: the only translation unit that includes gloo headers.
#include <cstdlib>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "train/process_group.h"

namespace frameworm {

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateGlooBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    const ProcessGroupOptions& o) {
  try {
    auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    const bool loopback = absl::StartsWith(o.master_addr, "127.") ||
                          o.master_addr == "localhost";
    if (ifname != nullptr && *ifname != '\0') {
      opts->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (loopback) {
      // Everything on this machine: keep the traffic on 127.0.0.1.
      opts->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    return c10::intrusive_ptr<c10d::Backend>(
        c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank,
                                                     o.world_size, opts));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "creating the gloo process group (rank ", o.rank, "/", o.world_size,
        ") failed: ", e.what()));
  }
}

}  // namespace frameworm
