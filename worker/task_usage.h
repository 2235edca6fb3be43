// What a task's process tree uses, read from /proc, for the worker's
// /metrics: the CPU time of every live process in the tree (user + system,
// including the children each has reaped) and their resident memory. The
// tree is the task's process and every process whose parent chain leads to
// it (a trainer's DataLoader workers, a torchrun's ranks). Processes that
// exit between reads drop out.
//
// Thread safety: free functions (they read /proc only).
#ifndef FRAMEWORM_WORKER_TASK_USAGE_H_
#define FRAMEWORM_WORKER_TASK_USAGE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/prometheus_text.h"
#include "worker/supervisor.h"

namespace frameworm {

struct TreeUsage {
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;
  int processes = 0;  // 0: the task's process is gone
};

// Usage of `root`'s tree, from the /proc tree rooted at `proc` (tests pass
// a fake one).
TreeUsage ProcessTreeUsage(int64_t root, const std::string& proc = "/proc");
// The pids of `root`'s tree, root included, ascending.
std::vector<int64_t> ProcessTree(int64_t root, const std::string& proc = "/proc");

// The worker's /metrics: frameworm_worker_connected, _slots, _tasks; per
// running task (labels job, generation, rank) frameworm_task_cpu_seconds_total,
// frameworm_task_memory_bytes and frameworm_task_processes.
void WriteWorkerMetrics(const std::string& worker, int slots, bool connected,
                        const std::vector<TaskStatusInfo>& running,
                        const std::map<TaskKey, TreeUsage>& usage, PromWriter& w);

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_TASK_USAGE_H_
