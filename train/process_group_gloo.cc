// The Gloo backend: the only translation unit that includes gloo headers.
#include <cstdlib>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "absl/strings/str_cat.h"
#include "common/node_address.h"
#include "train/process_group.h"

namespace frameworm {

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateGlooBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    const ProcessGroupOptions& o) {
  try {
    auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    const bool loopback = IsLoopbackHost(o.master_addr);
    if (ifname != nullptr && *ifname != '\0') {
      // The operator named the interface: that wins.
      opts->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (loopback) {
      // Everything on this machine: keep the traffic on 127.0.0.1.
      opts->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      // Bind to the address that routes to the master, never to what the
      // hostname resolves to (127.0.1.1 on Debian: peers could not connect).
      absl::StatusOr<std::string> local = AddressToward(o.master_addr);
      if (!local.ok()) {
        return absl::UnavailableError(absl::StrCat(
            "gloo (rank ", o.rank, "/", o.world_size,
            "): no local address faces MASTER_ADDR ", o.master_addr, ": ",
            local.status().message(), "; set GLOO_SOCKET_IFNAME to choose one"));
      }
      opts->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForHostname(*local));
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
