#include "trainer/run.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <vector>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "train/data.h"
#include "train/json_values.h"
#include "train/trainer.h"
#include "trainer/checkpoint_handover.h"
#include "trainer/checkpoint_uploader.h"
#include "trainer/run_setup.h"
#include "trainer/liveness_pinger.h"
#include "trainer/step_reporter.h"
#include "trainer/trainer_channel.h"

namespace frameworm {
namespace {

// Every <dir>/ckpt-<step>.pt, the highest step first, or NOT_FOUND.
absl::StatusOr<std::vector<std::string>> CheckpointsNewestFirst(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return absl::NotFoundError(absl::StrCat("no checkpoint directory ", dir));
  std::vector<std::pair<int64_t, std::string>> found;  // names as on disk (ckpt-007.pt is step 7)
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind("ckpt-", 0) != 0 || n.size() < 9 || n.substr(n.size() - 3) != ".pt") continue;
    const std::string digits = n.substr(5, n.size() - 8);
    int64_t s = 0;
    if (digits.find_first_not_of("0123456789") == std::string::npos &&
        absl::SimpleAtoi(digits, &s)) {
      found.emplace_back(s, n);
    }
  }
  ::closedir(d);
  if (found.empty()) return absl::NotFoundError(absl::StrCat("no ckpt-<step>.pt in ", dir));
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<std::string> paths;
  for (const auto& [step, name] : found) paths.push_back(absl::StrCat(dir, "/", name));
  return paths;
}

int Fail(const std::string& what) {
  std::cerr << "frameworm-train: " << what << std::endl;
  return 1;
}

// Six significant digits (a diverged value is null).
std::string J(double v) { return JsonNumber(v, 6); }

// What a rank's failure message adds about its ReportBadCheckpoint.
std::string ReportedBad(const absl::StatusOr<bool>& kept) {
  if (!kept.ok()) return absl::StrCat("; reporting it failed: ", kept.status().message());
  return *kept ? "; reported: the coordinator removed its damaged copy and the next generation "
                 "fetches the checkpoint from the workers that hold it"
               : "; reported: the job resumes from the checkpoint before it";
}

// The recorder's newest 16 collectives, as a ping carries them.
StepReport::Collectives RecentCollectives(const FlightRecorder& rec) {
  const FlightRecorder::Snapshot snap = rec.Take(16);
  StepReport::Collectives out;
  out.enqueued = snap.enqueued;
  out.completed = snap.completed;
  for (const CollectiveRecord& c : snap.recent) {
    StepReport::Collective x;
    x.seq = c.seq;
    x.op = c.op;
    x.what = c.what;
    x.bucket = c.bucket;
    x.bytes = c.bytes;
    x.state = CollectiveStateName(c.state);
    x.age_seconds = std::max<int64_t>(0, snap.now_ns - c.enqueued_ns) / 1e9;
    x.seconds = c.ended_ns > 0 ? std::max<int64_t>(0, c.ended_ns - c.enqueued_ns) / 1e9 : 0;
    out.recent.push_back(std::move(x));
  }
  return out;
}

}  // namespace

int RunTrainer(const TrainConfig& f, const RankEnv& env, bool distributed) {
  torch::set_num_threads(static_cast<int>(f.threads));
  const int rank = env.rank;
  absl::StatusOr<RunSetup> setup = BuildRunSetup(f);
  if (!setup.ok()) return Fail(std::string(setup.status().message()));
  const int64_t train_samples = setup->train.size();
  DataLoader train_loader(std::move(setup->train), DataLoaderOptions{f.batch_size, true, f.seed, false});
  DataLoader val_loader(std::move(setup->val), DataLoaderOptions{256, false, f.seed, false});
  const Model& model = *setup->model;
  std::shared_ptr<torch::optim::Optimizer> opt = setup->optimizer;

  TrainerOptions to;
  to.loss = setup->loss;
  to.metrics = setup->metrics;
  to.forward = setup->forward;
  to.clip_grad_norm = f.clip_grad_norm;
  to.lr_schedule = f.lr_schedule;
  if (f.autocast_bf16) to.autocast = torch::kBFloat16;
  to.eval_every = f.eval_every;
  to.monitor = f.monitor;
  to.early_stopping_patience = f.early_stopping_patience;
  to.keep_best = f.keep_best;
  to.epochs = f.epochs;
  to.max_steps = f.max_steps;
  to.gradient_accumulation_steps = static_cast<int>(f.grad_accum);
  to.warmup_steps = f.warmup_steps;
  to.log_every = f.log_every;
  to.checkpoint_dir = f.checkpoint_dir;
  to.checkpoint_every = f.checkpoint_every;
  to.async_checkpoint = f.async_checkpoint;
  to.memory_checkpoint_dir = f.memory_checkpoint_dir;
  to.memory_checkpoint_every = f.memory_checkpoint_every;

  // Step timing (steady state: the first steps are excluded).
  double step_time_sum = 0;
  int64_t step_time_n = 0;
  // Cluster mode: a job's trainer (the worker sets both). A shell that only
  // exports FRAMEWORM_COORDINATOR for the CLI runs a local trainer.
  std::unique_ptr<ControlChannel> channel;
  std::unique_ptr<ControlChannel> ckpt_channel;
  std::unique_ptr<ControlChannel> ping_channel;  // the liveness thread's own
  std::unique_ptr<ControlChannel> upload_channel;  // rank 0's uploader's own
  if (!env.coordinator.empty() && !env.job_id.empty()) {
    TrainerChannelOptions co;
    co.coordinator = env.coordinator;
    co.tls_dir = env.tls_dir;
    co.job_id = env.job_id;
    co.generation = env.generation;
    co.rank = rank;
    co.token = env.token;
    co.connect_timeout = absl::Seconds(f.connect_timeout_s);
    auto ch = NewTrainerChannel(co);
    if (!ch.ok()) return Fail(std::string(ch.status().message()));
    channel = std::move(*ch);
    // Rank 0 reports in-memory checkpoints from the checkpoint thread, on
    // a channel of its own, and uploads disk ones from its uploader's
    // thread on another (below); no other rank does.
    if (rank == 0) {
      ch = NewTrainerChannel(co);
      if (!ch.ok()) return Fail(std::string(ch.status().message()));
      ckpt_channel = std::move(*ch);
      if (f.async_checkpoint) {
        ch = NewTrainerChannel(co);
        if (!ch.ok()) return Fail(std::string(ch.status().message()));
        upload_channel = std::move(*ch);
      }
    }
    ch = NewTrainerChannel(co);
    if (!ch.ok()) return Fail(std::string(ch.status().message()));
    ping_channel = std::move(*ch);
    to.sync_step_actions = true;
    // The broadcast at most 1% of the steps' time, an action at most 50 ms
    // late (the step reporter's pause): on one machine, every step.
    to.step_action_sync_share = 0.01;
    to.step_action_max_delay_seconds = 0.05;
  }
  int64_t last_requested = 0;
  int64_t last_step = 0;
  std::atomic<int64_t> pinged_step{0};  // last_step, for the liveness thread
  std::mutex warning_mu;  // on_checkpoint_skipped may run on the checkpoint thread
  std::string warning;   // rides on the next step report; guarded by warning_mu
  to.on_checkpoint_skipped = [&](int64_t step, const std::string& why) {
    std::lock_guard<std::mutex> l(warning_mu);
    warning = absl::StrCat("checkpoint of step ", step,
                           " skipped (training goes on, the previous checkpoint stays): ", why);
  };
  auto last_contact = std::chrono::steady_clock::now();
  // Step and progress reports go through this (its own thread, batched),
  // created when training starts, once the training thread is done with
  // `channel` (resume); closed (flushed) before the process exits.
  std::unique_ptr<StepReporter> reporter;
  // Rank 0's disk checkpoint being written or uploaded (set once the
  // trainer and the uploader exist, below).
  std::function<int64_t()> checkpoint_in_flight = [] { return int64_t{0}; };
  to.on_step = [&](const StepInfo& s) -> absl::StatusOr<StepAction> {
    if (s.step > 5) {
      step_time_sum += s.seconds;
      ++step_time_n;
    }
    StepAction a;
    if (!reporter) return a;
    StepReport r;
    r.rank = rank;
    r.step = s.step;
    r.epoch = static_cast<int>(s.epoch);
    r.samples = s.samples;
    r.step_seconds = s.seconds;
    r.wait_seconds = s.wait_seconds;
    r.data_seconds = s.data_seconds;
    // Planned steps (for progress and ETA): epochs x optimizer steps per
    // epoch (the loader is split across ranks by now), capped by max-steps.
    const int64_t per_epoch =
        (train_loader.num_batches() + f.grad_accum - 1) / f.grad_accum;
    r.total_steps = f.epochs * per_epoch;
    if (f.max_steps > 0) r.total_steps = std::min(r.total_steps, f.max_steps);
    // The coordinator takes finite values only (a diverged loss is left
    // out; the step still counts as progress).
    r.values = {{"lr", s.lr}};
    if (std::isfinite(s.loss)) r.values["loss"] = s.loss;
    for (const auto& [name, v] : s.metrics) {
      if (std::isfinite(v)) r.values[name] = v;
    }
    std::string sent;
    {
      std::lock_guard<std::mutex> l(warning_mu);
      sent = warning;
    }
    r.warning = sent.substr(0, 512);
    r.checkpoint_in_flight = checkpoint_in_flight();
    auto d = reporter->Submit(std::move(r));
    if (!sent.empty()) {  // handed over (a batch that fails drops it, as before)
      std::lock_guard<std::mutex> l(warning_mu);
      if (warning == sent) warning.clear();
    }
    last_step = s.step;
    pinged_step.store(s.step);
    last_contact = std::chrono::steady_clock::now();
    if (!d.ok()) {
      if (d.status().code() == absl::StatusCode::kAborted) {
        return absl::AbortedError(absl::StrCat("the coordinator ended this generation: ", d.status().message()));
      }
      if (d.status().code() == absl::StatusCode::kPermissionDenied) {
        return absl::PermissionDeniedError(absl::StrCat("the coordinator refuses this rank: ", d.status().message()));
      }
      return a;  // coordinator away: keep training
    }
    if (d->checkpoint_at_step > last_requested && s.step >= d->checkpoint_at_step) {
      last_requested = d->checkpoint_at_step;
      a.checkpoint = true;
    }
    a.stop = d->stop;
    return a;
  };
  // A checkpoint or a stop: the generation may end soon (a growth, a
  // drain), so the steps' reports go now, not after the reporter's pause.
  to.on_action = [&](const StepInfo&, const StepAction&) {
    if (reporter) reporter->SendNow();
  };
  // During evaluation and checkpointing (no steps), a sign of life at most
  // once a second, so the coordinator does not take this rank for hung.
  to.on_progress = [&]() {
    if (!reporter) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_contact < std::chrono::seconds(1)) return;
    last_contact = now;
    StepReport r;
    r.rank = rank;
    r.step = last_step;
    r.progress_only = true;
    r.checkpoint_in_flight = checkpoint_in_flight();
    (void)reporter->Submit(std::move(r));  // best effort; a step report handles errors
  };
  auto not_handed_over = [&](const CheckpointReport& cr, const absl::Status& why) {
    std::cerr << "frameworm-train: checkpoint " << cr.path << " not reported: " << why.message()
              << (cr.memory ? " (the in-memory file is removed)" : "") << std::endl;
    if (cr.memory || why.code() == absl::StatusCode::kAborted) return;  // a newer one comes
    // Shown by `status` (the job's warning) until a newer one: a refusal
    // that repeats (the coordinator's disk has no room) is not silent.
    std::lock_guard<std::mutex> l(warning_mu);
    warning = absl::StrCat("checkpoint of step ", cr.step,
                           " not reported (the file stays on rank 0's disk): ", why.ToString());
  };
  // Rank 0's disk checkpoints of asynchronous saves, handed over on a
  // thread and channel of their own (a synchronous save hands over before
  // it returns, as before).
  std::unique_ptr<CheckpointUploader> uploader;
  if (upload_channel) {
    uploader = std::make_unique<CheckpointUploader>(
        std::move(upload_channel), f.checkpoint_dir, f.memory_checkpoint_dir, not_handed_over);
  }
  to.on_checkpoint = [&](int64_t step, const std::string& path, const CheckpointFileInfo& info) {
    ControlChannel* channel = ckpt_channel.get();
    if (!channel) return;
    CheckpointReport cr;
    cr.step = step;
    cr.path = path;
    cr.bytes = info.bytes;
    cr.checksum = info.checksum;
    cr.memory = !f.memory_checkpoint_dir.empty() &&
                path.rfind(f.memory_checkpoint_dir + "/", 0) == 0;
    // A disk checkpoint of an asynchronous save uploads on the uploader's
    // thread: this (checkpoint) thread is free for in-memory checkpoints.
    if (uploader && !cr.memory) {
      uploader->Submit(std::move(cr));
      return;
    }
    absl::Status handed =
        HandOverCheckpoint(*channel, cr, f.checkpoint_dir, f.memory_checkpoint_dir);
    if (!handed.ok()) not_handed_over(cr, handed);
  };

  std::unique_ptr<Trainer> trainer;
  int world = 1;
  // How gradients are averaged: "none" (one process), "shm" (intra-node
  // shared memory) or the process group's backend.
  std::string gradient_path = "none";
  if (distributed) {
    DistributedOptions o;
    o.backend = f.backend;
    o.gradient_accumulation_steps = static_cast<int>(f.grad_accum);
    o.scale_lr = f.scale_lr;
    o.find_unused_parameters = f.find_unused_parameters;
    o.intra_node_shm = f.intra_node_shm;
    o.flight_recorder_entries = static_cast<size_t>(f.flight_recorder);
    o.trainer = to;
    auto t = DistributedTrainer::Create(model, opt, o);
    if (!t.ok()) return Fail(std::string(t.status().message()));
    world = (*t)->world_size();
    gradient_path =
        (*t)->intra_node_active() ? "shm" : (*t)->process_group()->getBackendName();
    trainer = std::move(*t);
  } else {
    if (f.backend == "mpi" || f.backend == "nccl") {
      ProcessGroupOptions po;
      po.backend = f.backend;
      auto pg = CreateProcessGroup(po);  // surfaces "mpi"/"nccl" errors
      if (!pg.ok()) return Fail(std::string(pg.status().message()));
    }
    torch::Device device = torch::kCPU;
    if (f.device == "cuda" || (f.device == "auto" && torch::cuda::is_available())) {
      if (!torch::cuda::is_available()) return Fail("--device=cuda but CUDA is not available");
      device = torch::Device(torch::kCUDA, 0);
    }
    trainer = std::make_unique<Trainer>(model, opt, device, to);
  }
  checkpoint_in_flight = [&] {
    // The trainer first: it lets go of a checkpoint only after handing it
    // to the uploader, so a 0 read here means the uploader shows it now.
    const int64_t writing = trainer->disk_checkpoint_in_flight();
    return std::max(writing, uploader ? uploader->InFlightStep() : int64_t{0});
  };

  std::string resume = env.resume_from.empty() ? f.resume : env.resume_from;
  bool loaded = false;
  if (resume == "latest") {
    // The newest checkpoint that loads: a torn or corrupt one (DATA_LOSS,
    // which changes nothing) gives way to the one before it.
    auto all = CheckpointsNewestFirst(f.checkpoint_dir);
    if (!all.ok()) return Fail(std::string(all.status().message()));
    std::string why;
    for (const std::string& path : *all) {
      absl::Status s = trainer->load_checkpoint(path);
      if (s.ok()) {
        resume = path;
        loaded = true;
        break;
      }
      if (s.code() != absl::StatusCode::kDataLoss) return Fail(std::string(s.message()));
      std::cerr << "frameworm-train: " << s.message() << "; trying the checkpoint before it"
                << std::endl;
      absl::StrAppend(&why, why.empty() ? "" : "; ", s.message());
    }
    if (!loaded) {
      return Fail(absl::StrCat("no checkpoint in ", f.checkpoint_dir, " loads: ", why));
    }
  }
  std::string load_from = resume;
  bool private_copy = false;
  std::error_code resume_ec;  // unreadable here (EACCES, a loop): fetched too
  if (!resume.empty() && channel && !env.resume_from.empty() &&
      !std::filesystem::exists(resume, resume_ec)) {
    // Not on this host's disk (written on another host): fetch the
    // coordinator's copy. Rank 0 keeps it where the job's checkpoints live
    // (its retention applies there); any other rank fetches a private copy
    // and removes it once loaded, so a host that only resumed from a
    // checkpoint keeps nothing of it.
    private_copy = rank != 0;
    if (private_copy) load_from = absl::StrCat(resume, ".rank", rank, "-", ::getpid());
    absl::Status got = channel->DownloadCheckpoint(resume, load_from);
    if (!got.ok()) {
      const std::string why = absl::StrCat("checkpoint ", resume,
                                           " is not on this host and fetching it from the "
                                           "coordinator failed: ", got.message());
      if (got.code() != absl::StatusCode::kNotFound && got.code() != absl::StatusCode::kDataLoss)
        return Fail(why);
      // No copy anywhere (an in-memory checkpoint whose holders are gone):
      // the job resumes from the checkpoint before it. The coordinator's is
      // damaged (its bytes are not the record's): the coordinator removes
      // it, and while workers hold the checkpoint the next generation
      // fetches it from them.
      const bool damaged = got.code() == absl::StatusCode::kDataLoss;
      absl::StatusOr<bool> kept = channel->ReportBadCheckpoint(resume, why, damaged);
      return Fail(absl::StrCat(why, ReportedBad(kept)));
    }
  }
  if (!resume.empty() && !loaded) {
    absl::Status s = trainer->load_checkpoint(load_from);
    if (private_copy) {
      std::error_code ec;
      std::filesystem::remove(load_from, ec);
    }
    if (s.code() == absl::StatusCode::kDataLoss && channel && !env.resume_from.empty() &&
        !private_copy) {
      // This host's file is damaged (torn, bit-flipped): the coordinator's
      // copy was checked against the recorded CRC when it was uploaded.
      // Loading changed nothing, so try that copy; rank 0 then puts it in
      // place of the damaged file.
      const std::string fetched = absl::StrCat(resume, ".refetch-", ::getpid());
      absl::Status got = channel->DownloadCheckpoint(resume, fetched);
      if (got.ok()) got = trainer->load_checkpoint(fetched);
      std::error_code ec;
      if (got.ok()) {
        std::cerr << "frameworm-train: checkpoint " << resume << " on this host is damaged ("
                  << s.message() << "); loaded the coordinator's copy instead" << std::endl;
        if (rank == 0) std::filesystem::rename(fetched, resume, ec);
        s = absl::OkStatus();
      } else {
        s = absl::DataLossError(absl::StrCat(s.message(), "; the coordinator's copy did not load either: ",
                                             got.message()));
      }
      std::filesystem::remove(fetched, ec);
    }
    if (s.code() == absl::StatusCode::kDataLoss && channel && !env.resume_from.empty()) {
      // No copy loads: the coordinator drops this checkpoint, and the next
      // generation resumes from the one before it.
      absl::StatusOr<bool> kept =
          channel->ReportBadCheckpoint(resume, std::string(s.message()), /*coordinator_copy=*/false);
      return Fail(absl::StrCat(s.message(), ReportedBad(kept)));
    }
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  if (!resume.empty() && rank == 0) {
    std::cout << "{\"event\":\"resumed\",\"path\":\"" << resume << "\",\"step\":"
              << trainer->state().step << ",\"epoch\":" << trainer->state().epoch << "}"
              << std::endl;
  }
  if (rank == 0) {
    std::cout << "{\"event\":\"start\",\"model\":\"" << f.model << "\",\"dataset\":\"" << f.dataset
              << "\",\"world_size\":" << world << ",\"batch_size\":" << f.batch_size
              << ",\"train_samples\":" << train_samples << ",\"loss\":\"" << f.loss
              << "\",\"threads\":" << f.threads
              << ",\"gradient_allreduce\":\"" << gradient_path << "\"}"
              << std::endl;
  }
  // Liveness pings (StepReport.ping) about once a second while training:
  // how long the training thread has been blocked in the gradient
  // collectives, so a hang names the rank the others wait for.
  if (channel) reporter = std::make_unique<StepReporter>(channel.get());
  LivenessPinger pinger(ping_channel.get(), rank, [&](StepReport& r) {
    r.step = pinged_step.load();
    r.waiting_seconds = trainer->collective_wait_seconds();
    if (const FlightRecorder* rec = trainer->flight_recorder()) r.collectives = RecentCollectives(*rec);
  });
  absl::Status s = trainer->train(train_loader, val_loader);
  // The last disk checkpoint is recorded before this rank exits (a
  // generation that ends on a checkpoint resumes from it); a sign of life
  // each second meanwhile, so a long upload is not taken for a hang.
  while (uploader && !uploader->Drain(absl::Seconds(1))) to.on_progress();
  pinger.Stop();
  // The last steps' reports reach the coordinator before the exit does.
  if (reporter) (void)reporter->Close(std::chrono::seconds(10));
  if (!s.ok()) {
    // Post mortem: which collectives this rank had issued and finished.
    if (const FlightRecorder* rec = trainer->flight_recorder()) {
      std::cerr << "=== frameworm: flight recorder of rank " << rank << " (oldest first) ===\n"
                << rec->Dump() << "=== frameworm: end of flight recorder ===" << std::endl;
    }
    return Fail(std::string(s.message()));
  }
  const TrainerState& st = trainer->state();
  std::string exported;
  if (rank == 0 && setup->script) {
    // The trained model, loadable with torch.jit.load in Python.
    exported = f.export_path.empty() ? f.checkpoint_dir + "/model.pt" : f.export_path;
    if (absl::Status e = setup->script->Save(exported); !e.ok()) return Fail(std::string(e.message()));
  }
  if (rank == 0) {
    const int64_t epochs = st.epoch + (st.batch_in_epoch > 0 ? 1 : 0);
    // loss, then each metric, as the trainer computed them (missing ones,
    // e.g. train metrics before a full epoch, are left out).
    std::vector<std::string> names = {"loss"};
    for (const auto& [k, fn] : to.metrics) names.push_back(k);
    auto values = [&](const char* prefix, const std::map<std::string, double>& m) {
      return JsonValues(prefix, m, names, 6);
    };
    std::cout << "{\"event\":\"done\",\"epochs\":" << epochs << ",\"steps\":" << st.step
              << values("train_", st.train_metrics) << values("val_", st.val_metrics)
              << ",\"world_size\":" << world << ",\"mean_step_seconds\":"
              << J(step_time_n > 0 ? step_time_sum / step_time_n : 0.0)
              << (exported.empty() ? "" : ",\"model\":\"" + exported + "\"")
              << (trainer->flight_recorder() == nullptr
                      ? ""
                      : absl::StrCat(",\"collectives\":", trainer->flight_recorder()->Take(0).enqueued))
              << "}" << std::endl;
  }
  if (distributed) cleanup_distributed();
  return 0;
}

}  // namespace frameworm
