// Stack traces of a task's processes, taken from outside: for every process
// of the task's tree except frameworm-task-shim itself, `eu-stack -p PID`
// (elfutils: every thread, symbolized from the ELF symbol tables, about
// 0.1 s for a LibTorch trainer; a stopped or blocked process is fine). For
// a Python program these are the interpreter's C frames.
//
// The text is a block meant for the task's stderr log:
//   === frameworm: stacks of job J generation G rank R (WHY) at TIME ===
//   --- pid P: CMDLINE ---
//   <eu-stack output>
//   === frameworm: end of stacks ===
// Bounds: `timeout` for the whole block (it runs on the worker's loop,
// between heartbeats): each eu-stack gets what is left of it (then
// SIGKILL; the block says so); at most 256 KiB of output per process and
// 16 processes. Without
// eu-stack on the PATH the block says to install elfutils.
//
// Thread safety: free functions; DumpStacks blocks for up to `timeout`.
#ifndef FRAMEWORM_WORKER_STACK_DUMP_H_
#define FRAMEWORM_WORKER_STACK_DUMP_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "worker/supervisor.h"

namespace frameworm {

std::string DumpStacks(const TaskKey& key, int64_t root_pid, const std::string& why,
                       absl::Duration timeout = absl::Seconds(5));

// Runs argv (no shell), returns stdout and stderr together, at most
// `max_bytes` of it; kills it after `timeout`. `*timed_out` says whether it
// was killed. An argv[0] that cannot run gives "cannot run ...".
std::string RunBounded(const std::vector<std::string>& argv, absl::Duration timeout,
                       size_t max_bytes, bool* timed_out);

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_STACK_DUMP_H_
