// frameworm-train: built-in models (mlp, cnn) on Fashion-MNIST or a
// synthetic dataset, alone, under launch_distributed (--nprocs N), under
// torchrun-style variables, or as a cluster trainer (FRAMEWORM_COORDINATOR).
// Flags and environment are read here only.
//
// Output on rank 0: one JSON object per line ({"event":"epoch",...},
// {"event":"step",...} with --log-every, {"event":"checkpoint",...}); the
// last line is {"event":"done",...}. Exit: 0 success, 2 bad flags, 1 any
// other failure (one line on stderr).
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/trainer_channel.h"
#include "train/data.h"
#include "train/launch.h"
#include "train/models.h"
#include "train/trainer.h"

namespace frameworm {
namespace {

struct Flags {
  std::string model = "cnn";
  std::string dataset = "fashion-mnist";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t epochs = 1;
  int64_t max_steps = 0;
  int64_t batch_size = 64;
  double lr = 0.05;
  std::string optimizer = "sgd";
  double momentum = 0.9;
  int64_t warmup_steps = 0;
  bool scale_lr = false;
  int64_t grad_accum = 1;
  std::string backend;  // default: nccl with CUDA, else gloo
  std::string checkpoint_dir = "checkpoints";
  int64_t checkpoint_every = 0;
  std::string resume;
  uint64_t seed = 0;
  int64_t threads = 1;
  int64_t nprocs = 1;
  int64_t log_every = 0;
  int64_t synthetic_size = 2048;
  bool find_unused_parameters = false;
  // One process: where it trains. auto = the first GPU if CUDA is
  // available, else the CPU. (Distributed runs: nccl -> cuda:LOCAL_RANK.)
  std::string device = "auto";
};

constexpr char kUsage[] =
    "usage: frameworm-train [--model=cnn|mlp] [--dataset=fashion-mnist|synthetic]\n"
    "  [--data-dir=DIR] [--epochs=N] [--max-steps=N] [--batch-size=N (per process)]\n"
    "  [--lr=X] [--optimizer=sgd|adam] [--momentum=X] [--warmup-steps=N] [--scale-lr]\n"
    "  [--grad-accum=N] [--backend=gloo|nccl|mpi] [--checkpoint-dir=DIR]\n"
    "  [--checkpoint-every=N] [--resume=PATH|latest] [--seed=N] [--threads=N]\n"
    "  [--nprocs=N] [--log-every=N] [--synthetic-size=N] [--find-unused-parameters]\n"
    "  [--device=auto|cpu|cuda]\n";

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  std::map<std::string, std::string*> str = {
      {"model", &f.model},           {"dataset", &f.dataset},
      {"data-dir", &f.data_dir},     {"optimizer", &f.optimizer},
      {"backend", &f.backend},       {"checkpoint-dir", &f.checkpoint_dir},
      {"resume", &f.resume},         {"device", &f.device}};
  std::map<std::string, std::pair<int64_t*, int64_t>> ints = {
      {"epochs", {&f.epochs, 1}},          {"max-steps", {&f.max_steps, 0}},
      {"batch-size", {&f.batch_size, 1}},  {"warmup-steps", {&f.warmup_steps, 0}},
      {"grad-accum", {&f.grad_accum, 1}},  {"checkpoint-every", {&f.checkpoint_every, 0}},
      {"threads", {&f.threads, 1}},        {"nprocs", {&f.nprocs, 1}},
      {"log-every", {&f.log_every, 0}},    {"synthetic-size", {&f.synthetic_size, 1}}};
  std::map<std::string, double*> dbl = {{"lr", &f.lr}, {"momentum", &f.momentum}};
  std::map<std::string, bool*> bools = {{"scale-lr", &f.scale_lr},
                                        {"find-unused-parameters", &f.find_unused_parameters}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", a, "\""));
    }
    a = a.substr(2);
    std::string name = a, value;
    bool has_value = false;
    if (auto eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    if (auto b = bools.find(name); b != bools.end()) {
      if (!has_value || value == "true" || value == "1") {
        *b->second = true;
      } else if (value == "false" || value == "0") {
        *b->second = false;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes true or false, got \"", value, "\""));
      }
      continue;
    }
    const bool known = str.count(name) || ints.count(name) || dbl.count(name) || name == "seed";
    if (!known) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (!has_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      value = argv[++i];
    }
    if (auto s = str.find(name); s != str.end()) {
      *s->second = value;
    } else if (auto n = ints.find(name); n != ints.end()) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(value, &v) || v < n->second.second) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " must be an integer >= ",
                                                       n->second.second, ", got \"", value, "\""));
      }
      *n->second.first = v;
    } else if (auto d = dbl.find(name); d != dbl.end()) {
      double v = 0;
      if (!absl::SimpleAtod(value, &v) || !(v >= 0)) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " must be a number >= 0, got \"", value, "\""));
      }
      *d->second = v;
    } else if (name == "seed") {
      uint64_t v = 0;
      if (!absl::SimpleAtoi(value, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("--seed must be a non-negative integer, got \"", value, "\""));
      }
      f.seed = v;
    }
  }
  if (f.model != "cnn" && f.model != "mlp") {
    return absl::InvalidArgumentError(absl::StrCat("--model must be cnn or mlp, got \"", f.model, "\""));
  }
  if (f.dataset != "fashion-mnist" && f.dataset != "synthetic") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset must be fashion-mnist or synthetic, got \"", f.dataset, "\""));
  }
  if (f.optimizer != "sgd" && f.optimizer != "adam") {
    return absl::InvalidArgumentError(absl::StrCat("--optimizer must be sgd or adam, got \"", f.optimizer, "\""));
  }
  if (!f.backend.empty() && f.backend != "gloo" && f.backend != "nccl" && f.backend != "mpi") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend must be gloo, nccl or mpi, got \"", f.backend, "\""));
  }
  if (f.device != "auto" && f.device != "cpu" && f.device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be auto, cpu or cuda, got \"", f.device, "\""));
  }
  if (f.lr <= 0) return absl::InvalidArgumentError("--lr must be > 0");
  return f;
}

std::optional<std::string> Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// Newest <dir>/ckpt-<step>.pt, or NOT_FOUND.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return absl::NotFoundError(absl::StrCat("no checkpoint directory ", dir));
  int64_t best = -1;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind("ckpt-", 0) != 0 || n.size() < 9 || n.substr(n.size() - 3) != ".pt") continue;
    int64_t s = 0;
    if (absl::SimpleAtoi(n.substr(5, n.size() - 8), &s) && s > best) best = s;
  }
  ::closedir(d);
  if (best < 0) return absl::NotFoundError(absl::StrCat("no ckpt-<step>.pt in ", dir));
  return absl::StrCat(dir, "/ckpt-", best, ".pt");
}

int Fail(const std::string& what) {
  std::cerr << "frameworm-train: " << what << std::endl;
  return 1;
}

std::string J(double v) { return absl::StrFormat("%.6g", v); }

// One process's training. `distributed`: RANK/WORLD_SIZE are set.
int RunTrainer(const Flags& f, bool distributed) {
  torch::set_num_threads(static_cast<int>(f.threads));
  int rank = 0;
  if (distributed) {
    auto env = ReadDistributedEnv();
    if (!env.ok()) return Fail(std::string(env.status().message()));
    rank = env->rank;
  }
  absl::StatusOr<Dataset> train_set, val_set;
  if (f.dataset == "fashion-mnist") {
    train_set = LoadFashionMnist(f.data_dir, "train");
    if (!train_set.ok()) return Fail(std::string(train_set.status().message()));
    val_set = LoadFashionMnist(f.data_dir, "test");
    if (!val_set.ok()) return Fail(std::string(val_set.status().message()));
  } else {
    train_set = MakeSyntheticDataset(f.synthetic_size, f.seed);
    val_set = MakeSyntheticDataset(std::max<int64_t>(64, f.synthetic_size / 4), f.seed + 1);
  }
  DataLoader train_loader(*train_set, DataLoaderOptions{f.batch_size, true, f.seed, false});
  DataLoader val_loader(*val_set, DataLoaderOptions{256, false, f.seed, false});

  torch::manual_seed(f.seed);
  auto model = MakeModel(f.model);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  std::shared_ptr<torch::optim::Optimizer> opt;
  if (f.optimizer == "adam") {
    opt = std::make_shared<torch::optim::Adam>((*model)->parameters(), torch::optim::AdamOptions(f.lr));
  } else {
    opt = std::make_shared<torch::optim::SGD>((*model)->parameters(),
                                              torch::optim::SGDOptions(f.lr).momentum(f.momentum));
  }

  TrainerOptions to;
  to.epochs = f.epochs;
  to.max_steps = f.max_steps;
  to.gradient_accumulation_steps = static_cast<int>(f.grad_accum);
  to.warmup_steps = f.warmup_steps;
  to.log_every = f.log_every;
  to.checkpoint_dir = f.checkpoint_dir;
  to.checkpoint_every = f.checkpoint_every;

  // Step timing (steady state: the first steps are excluded).
  double step_time_sum = 0;
  int64_t step_time_n = 0;
  // Cluster mode.
  std::unique_ptr<ControlChannel> channel;
  if (auto coord = Env("FRAMEWORM_COORDINATOR")) {
    TrainerChannelOptions co;
    co.coordinator = *coord;
    co.job_id = Env("FRAMEWORM_JOB_ID").value_or("");
    int64_t gen = 0;
    if (auto g = Env("FRAMEWORM_GENERATION"); g && !absl::SimpleAtoi(*g, &gen)) {
      return Fail(absl::StrCat("environment variable FRAMEWORM_GENERATION=\"", *g, "\" is not an integer"));
    }
    co.generation = gen;
    co.rank = rank;
    auto ch = NewTrainerChannel(co);
    if (!ch.ok()) return Fail(absl::StrCat("cannot reach the coordinator: ", ch.status().message()));
    channel = std::move(*ch);
    to.sync_step_actions = true;
  }
  int64_t last_requested = 0;
  int64_t last_step = 0;
  auto last_contact = std::chrono::steady_clock::now();
  to.on_step = [&](const StepInfo& s) -> absl::StatusOr<StepAction> {
    if (s.step > 5) {
      step_time_sum += s.seconds;
      ++step_time_n;
    }
    StepAction a;
    if (!channel) return a;
    StepReport r;
    r.rank = rank;
    r.step = s.step;
    r.epoch = static_cast<int>(s.epoch);
    r.samples = s.samples;
    r.step_seconds = s.seconds;
    // Planned steps (for progress and ETA): epochs x optimizer steps per
    // epoch (the loader is split across ranks by now), capped by max-steps.
    const int64_t per_epoch =
        (train_loader.num_batches() + f.grad_accum - 1) / f.grad_accum;
    r.total_steps = f.epochs * per_epoch;
    if (f.max_steps > 0) r.total_steps = std::min(r.total_steps, f.max_steps);
    r.values = {{"loss", s.loss}, {"accuracy", s.accuracy}, {"lr", s.lr}};
    auto d = channel->ReportStep(r);
    last_step = s.step;
    last_contact = std::chrono::steady_clock::now();
    if (!d.ok()) {
      if (d.status().code() == absl::StatusCode::kAborted) {
        return absl::AbortedError(absl::StrCat("the coordinator ended this generation: ", d.status().message()));
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
  // During evaluation and checkpointing (no steps), a sign of life at most
  // once a second, so the coordinator does not take this rank for hung.
  to.on_progress = [&]() {
    if (!channel) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_contact < std::chrono::seconds(1)) return;
    last_contact = now;
    StepReport r;
    r.rank = rank;
    r.step = last_step;
    r.progress_only = true;
    (void)channel->ReportStep(r);  // best effort; a step report handles errors
  };
  to.on_checkpoint = [&](int64_t step, const std::string& path, const CheckpointFileInfo& info) {
    if (!channel) return;
    CheckpointReport cr;
    cr.step = step;
    cr.path = path;
    cr.bytes = info.bytes;
    cr.checksum = info.checksum;
    absl::Status s = channel->ReportCheckpoint(cr);
    if (!s.ok()) std::cerr << "frameworm-train: checkpoint report failed: " << s << std::endl;
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
    // FRAMEWORM_NO_SHM=1: average gradients over the process group even
    // when every rank is on this machine (no shared-memory allreduce).
    const char* no_shm = std::getenv("FRAMEWORM_NO_SHM");
    o.intra_node_shm = !(no_shm != nullptr && std::string(no_shm) == "1");
    o.trainer = to;
    auto t = DistributedTrainer::Create(*model, opt, o);
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
    trainer = std::make_unique<Trainer>(*model, opt, device, to);
  }

  std::string resume = f.resume;
  if (auto r = Env("FRAMEWORM_RESUME_FROM")) resume = *r;
  if (resume == "latest") {
    auto l = LatestCheckpoint(f.checkpoint_dir);
    if (!l.ok()) return Fail(std::string(l.status().message()));
    resume = *l;
  }
  if (!resume.empty()) {
    absl::Status s = trainer->load_checkpoint(resume);
    if (!s.ok()) return Fail(std::string(s.message()));
    if (rank == 0) {
      std::cout << "{\"event\":\"resumed\",\"path\":\"" << resume << "\",\"step\":"
                << trainer->state().step << ",\"epoch\":" << trainer->state().epoch << "}"
                << std::endl;
    }
  }
  if (rank == 0) {
    std::cout << "{\"event\":\"start\",\"model\":\"" << f.model << "\",\"dataset\":\"" << f.dataset
              << "\",\"world_size\":" << world << ",\"batch_size\":" << f.batch_size
              << ",\"train_samples\":" << train_set->size() << ",\"threads\":" << f.threads
              << ",\"gradient_allreduce\":\"" << gradient_path << "\"}"
              << std::endl;
  }
  absl::Status s = trainer->train(train_loader, val_loader);
  if (!s.ok()) return Fail(std::string(s.message()));
  const TrainerState& st = trainer->state();
  if (rank == 0) {
    const int64_t epochs = st.epoch + (st.batch_in_epoch > 0 ? 1 : 0);
    auto get = [](const std::map<std::string, double>& m, const char* k) {
      auto it = m.find(k);
      return it == m.end() ? 0.0 : it->second;
    };
    std::cout << "{\"event\":\"done\",\"epochs\":" << epochs << ",\"steps\":" << st.step
              << ",\"train_loss\":" << J(get(st.train_metrics, "loss"))
              << ",\"train_accuracy\":" << J(get(st.train_metrics, "accuracy"))
              << ",\"val_loss\":" << J(get(st.val_metrics, "loss"))
              << ",\"val_accuracy\":" << J(get(st.val_metrics, "accuracy"))
              << ",\"world_size\":" << world << ",\"mean_step_seconds\":"
              << J(step_time_n > 0 ? step_time_sum / step_time_n : 0.0) << "}" << std::endl;
  }
  if (distributed) cleanup_distributed();
  return 0;
}

}  // namespace
}  // namespace frameworm

int main(int argc, char** argv) {
  using namespace frameworm;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::cout << kUsage;
      return 0;
    }
  }
  auto flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::cerr << "frameworm-train: " << flags.status().message() << "\n" << kUsage;
    return 2;
  }
  if (flags->nprocs > 1 || IsLaunchedChild()) {
    // Children re-execute this program and run RunTrainer inside.
    absl::Status s = launch_distributed(
        [&](int, int) { return RunTrainer(*flags, /*distributed=*/true); },
        static_cast<int>(flags->nprocs));
    if (!s.ok()) {
      std::cerr << "frameworm-train: " << s.message() << std::endl;
      return 1;
    }
    return 0;
  }
  const bool distributed = std::getenv("WORLD_SIZE") != nullptr;
  return RunTrainer(*flags, distributed);
}
