#include "trainer/liveness_pinger.h"

namespace frameworm {

LivenessPinger::LivenessPinger(ControlChannel* channel, int rank, Probe probe,
                               std::chrono::milliseconds every) {
  if (channel == nullptr) return;
  thread_ = std::thread([this, channel, rank, probe = std::move(probe), every] {
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, every, [this] { return stop_; })) {
      l.unlock();
      StepReport r;
      probe(r);
      r.rank = rank;
      r.progress_only = true;
      r.ping = true;
      (void)channel->ReportStep(r);  // best effort
      l.lock();
    }
  });
}

void LivenessPinger::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace frameworm
