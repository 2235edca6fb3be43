#include "worker/task_usage.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace frameworm {
namespace {

struct ProcStat {
  int64_t ppid = 0;
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;
};

// /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces and
// parentheses, so fields are counted after the last ')'.
bool ReadStat(const std::string& path, ProcStat* out) {
  std::ifstream f(path);
  std::string line;
  if (!std::getline(f, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::vector<std::string> fields =
      absl::StrSplit(line.substr(close + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state): field N is fields[N - 3].
  if (fields.size() < 22) return false;
  static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  static const int64_t page = ::sysconf(_SC_PAGESIZE);
  int64_t utime = 0, stime = 0, cutime = 0, cstime = 0, rss = 0;
  if (!absl::SimpleAtoi(fields[1], &out->ppid) || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime) || !absl::SimpleAtoi(fields[13], &cutime) ||
      !absl::SimpleAtoi(fields[14], &cstime) || !absl::SimpleAtoi(fields[21], &rss)) {
    return false;
  }
  out->cpu_seconds = (utime + stime + cutime + cstime) / ticks;
  out->rss_bytes = rss * page;
  return true;
}

}  // namespace

// Every process of `proc` with its stat, and those in `root`'s tree.
static std::map<int64_t, ProcStat> TreeStats(int64_t root, const std::string& proc) {
  std::map<int64_t, ProcStat> all;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(proc, ec)) {
    int64_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    ProcStat st;
    if (ReadStat((entry.path() / "stat").string(), &st)) all[pid] = st;
  }
  std::map<int64_t, ProcStat> tree;
  for (const auto& [pid, st] : all) {
    // In the tree when the parent chain reaches root (bounded: no cycles).
    int64_t p = pid;
    for (int hops = 0; hops < 64 && p > 1 && p != root; ++hops) {
      auto it = all.find(p);
      if (it == all.end()) break;
      p = it->second.ppid;
    }
    if (p == root) tree[pid] = st;
  }
  return tree;
}

TreeUsage ProcessTreeUsage(int64_t root, const std::string& proc) {
  TreeUsage u;
  for (const auto& [pid, st] : TreeStats(root, proc)) {
    u.cpu_seconds += st.cpu_seconds;
    u.rss_bytes += st.rss_bytes;
    u.processes++;
  }
  return u;
}

std::vector<int64_t> ProcessTree(int64_t root, const std::string& proc) {
  std::vector<int64_t> out;
  for (const auto& [pid, st] : TreeStats(root, proc)) out.push_back(pid);
  return out;
}

void WriteWorkerMetrics(const std::string& worker, int slots, bool connected,
                        const std::vector<TaskStatusInfo>& running,
                        const std::map<TaskKey, TreeUsage>& usage, PromWriter& w) {
  const PromLabels me = {{"worker", worker}};
  w.Family("frameworm_worker_connected", "gauge", "1 while the worker holds a session with the coordinator.");
  w.Sample("frameworm_worker_connected", me, connected ? 1 : 0);
  w.Family("frameworm_worker_slots", "gauge", "Slots (GPUs) this worker offers.");
  w.Sample("frameworm_worker_slots", me, slots);
  w.Family("frameworm_worker_tasks", "gauge", "Tasks (ranks) running on this worker.");
  w.Sample("frameworm_worker_tasks", me, static_cast<double>(running.size()));
  if (running.empty()) return;
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const TreeUsage&);
  };
  static const Family kFamilies[] = {
      {"frameworm_task_cpu_seconds_total", "counter", "CPU time of the task's live process tree.",
       [](const TreeUsage& u) { return u.cpu_seconds; }},
      {"frameworm_task_memory_bytes", "gauge", "Resident memory of the task's process tree.",
       [](const TreeUsage& u) { return static_cast<double>(u.rss_bytes); }},
      {"frameworm_task_processes", "gauge", "Processes in the task's tree.",
       [](const TreeUsage& u) { return static_cast<double>(u.processes); }},
  };
  for (const Family& f : kFamilies) {
    w.Family(f.name, f.type, f.help);
    for (const TaskStatusInfo& t : running) {
      auto it = usage.find(t.key);
      const TreeUsage u = it == usage.end() ? TreeUsage{} : it->second;
      w.Sample(f.name,
               {{"worker", worker}, {"job_id", t.key.job_id},
                {"generation", absl::StrCat(t.key.generation)}, {"rank", absl::StrCat(t.key.rank)}},
               f.value(u));
    }
  }
}

}  // namespace frameworm
