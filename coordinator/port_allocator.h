// MASTER_PORT allocation: every running generation of a job gets a port of
// the coordinator's range that no other running generation holds, so two
// jobs whose rank 0 lands on one host never collide. Ports are handed out
// round-robin from where the last search stopped (not lowest-first), so a
// restarted generation gets a different port than the one it just gave
// back, whose TCPStore socket may still linger. The search starts at a
// random port of the range (Options::first), so a restarted coordinator
// does not hand out again the ports its previous run just used.
//
// Ownership: the allocator owns the set of ports in use; the job scheduler
// acquires a port when a generation starts and releases it when the
// generation ends (Reserve re-marks the ports of generations reloaded after
// a coordinator restart).
// Thread safety: not thread-safe; owned by the Coordinator under its mutex.
// Errors: Acquire returns RESOURCE_EXHAUSTED when every port is in use.
#ifndef FRAMEWORM_COORDINATOR_PORT_ALLOCATOR_H_
#define FRAMEWORM_COORDINATOR_PORT_ALLOCATOR_H_

#include <set>

#include "absl/status/statusor.h"

namespace frameworm::coordinator {

class PortAllocator {
 public:
  struct Options {
    int port_min = 29500;  // inclusive
    int port_max = 29999;  // inclusive
    int first = -1;        // where the search starts; outside the range: random
  };
  // Requires 0 < port_min <= port_max <= 65535 (the Coordinator checks).
  explicit PortAllocator(const Options& options);

  absl::StatusOr<int> Acquire();
  // Gives `port` back; releasing a port not in use does nothing.
  void Release(int port) { in_use_.erase(port); }
  // Marks `port` in use without moving the round-robin position.
  void Reserve(int port) { in_use_.insert(port); }
  int in_use() const { return static_cast<int>(in_use_.size()); }

 private:
  const Options options_;
  int next_;  // where the next search starts
  std::set<int> in_use_;
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_PORT_ALLOCATOR_H_
