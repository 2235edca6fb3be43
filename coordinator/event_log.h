// Lifecycle events (docs/ARCHITECTURE.md "Events"): the parts of the
// coordinator's core say what happened (a v1::Event with its kind, job and
// details); the EventLog stamps each with the next seq and the injected
// clock's time and stages it. The Coordinator takes the staged events
// after each call (TakePending, under its lock) and, outside the lock,
// stores them (Store::AddEvents) and prints each as one line (EventLine)
// on its log. Events are a record, not state: one that cannot be stored is
// logged and dropped, and nothing waits for them.
//
// Seqs increase over the cluster's life: Restore() continues after the
// store's high-water mark, so a restarted coordinator never reuses one.
//
// Thread safety: not thread-safe; owned by the Coordinator under its mutex.
#ifndef FRAMEWORM_COORDINATOR_EVENT_LOG_H_
#define FRAMEWORM_COORDINATOR_EVENT_LOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "coordinator/store.h"
#include "frameworm/v1/common.pb.h"

namespace frameworm::coordinator {

class EventLog {
 public:
  explicit EventLog(Clock& clock) : clock_(clock) {}

  // Stages `e` (its seq and unix_ms are set here) and returns it.
  const v1::Event& Emit(v1::Event e);
  // A new event of `kind` for `job_id` (empty: the cluster's) saying
  // `message`, for the caller to fill in and Emit.
  static v1::Event Make(const std::string& kind, const std::string& job_id,
                        const std::string& message);
  // The staged events, oldest first; none stay staged.
  std::vector<v1::Event> TakePending();
  bool HasPending() const { return !pending_.empty(); }
  // The next seq continues after `max_seq` (the store's high-water mark).
  void Restore(int64_t max_seq);
  int64_t last_seq() const { return next_seq_ - 1; }

 private:
  Clock& clock_;
  int64_t next_seq_ = 1;
  std::vector<v1::Event> pending_;
};

// The store row of an event.
EventRow RowOfEvent(const v1::Event& e);
// "event {...}": the event as one line of compact JSON with proto field
// names (no newline), for the coordinator's log.
std::string EventLine(const v1::Event& e);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_EVENT_LOG_H_
