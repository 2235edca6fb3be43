// frameworm-train: built-in models (mlp, cnn) or TorchScript models saved
// from Python, on Fashion-MNIST, a synthetic dataset or a tensor file, alone, as N local processes (--nprocs, through
// launch_distributed), as one rank of a torchrun-style run, or as a cluster
// trainer started by frameworm-worker. The command line (common/flags.h)
// and the environment (the rank environment, FRAMEWORM_NO_SHM) are read
// here only; the run itself is RunTrainer (trainer/run.h).
//
// Exit: 0 success, 2 bad flags (one line on stderr), 1 any other failure
// (one line on stderr).
#include <filesystem>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/commandlineflag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "train/launch.h"
#include "trainer/run.h"

namespace {

// The flags' defaults.
const frameworm::TrainConfig& Defaults() {
  static const auto* defaults = new frameworm::TrainConfig;
  return *defaults;
}

}  // namespace

ABSL_FLAG(std::string, model, Defaults().model,
          "cnn, mlp, or the path of a TorchScript model saved from Python "
          "(torch.jit.script(model).save(path))");
ABSL_FLAG(std::string, dataset, Defaults().dataset,
          "fashion-mnist or synthetic (ignored with --data)");
ABSL_FLAG(std::string, data, Defaults().data,
          "a tensor file saved from Python: torch.save({'x': inputs, 'y': targets}, path), "
          "optionally with x_val/y_val; other tensors are further inputs (--inputs)");
ABSL_FLAG(double, val_fraction, Defaults().val_fraction,
          "with --data and no x_val/y_val in it: hold out this last fraction for validation");
ABSL_FLAG(std::string, inputs, "x",
          "the data file's tensors passed to a TorchScript model's forward, in order "
          "(comma-separated)");
ABSL_FLAG(std::string, loss, Defaults().loss,
          "cross_entropy, nll, mse, l1, smooth_l1 or bce_with_logits");
ABSL_FLAG(std::string, metrics, Defaults().metrics,
          "comma-separated: accuracy, binary_accuracy, mse, mae; auto: the loss's usual "
          "ones (accuracy for cross_entropy/nll, mae for regression losses, binary_accuracy "
          "for bce_with_logits); none");
ABSL_FLAG(double, weight_decay, Defaults().weight_decay, "the optimizer's weight decay (>= 0)");
ABSL_FLAG(double, clip_grad_norm, Defaults().clip_grad_norm,
          "clip gradients to this total L2 norm after averaging; 0: off");
ABSL_FLAG(std::string, lr_schedule, Defaults().lr_schedule.kind,
          "after warmup: constant, step (x --lr-gamma every --lr-step-size steps), cosine "
          "or linear (to --min-lr over the run's steps)");
ABSL_FLAG(int64_t, lr_step_size, 0, "the step schedule's period in steps (>= 1)");
ABSL_FLAG(double, lr_gamma, Defaults().lr_schedule.gamma, "the step schedule's factor");
ABSL_FLAG(double, min_lr, Defaults().lr_schedule.min_lr,
          "where the cosine and linear schedules end");
ABSL_FLAG(std::string, autocast, "off",
          "off or bf16: forward and loss under torch::autocast in bfloat16 (CUDA; CPU "
          "autocast on the CPU)");
ABSL_FLAG(int64_t, eval_every, Defaults().eval_every,
          "also evaluate every N steps; 0: at epoch ends only");
ABSL_FLAG(std::string, monitor, Defaults().monitor,
          "the validation metric early stopping and --keep-best watch (loss or a metric, "
          "with or without val_; higher is better for names with 'accuracy'); empty: loss");
ABSL_FLAG(int64_t, early_stopping_patience, Defaults().early_stopping_patience,
          "stop after this many evaluations without improvement of --monitor; 0: never");
ABSL_FLAG(bool, keep_best, Defaults().keep_best,
          "write <checkpoint-dir>/ckpt-best.pt whenever --monitor improves");
ABSL_FLAG(std::string, export_path, Defaults().export_path,
          "with a TorchScript --model: where rank 0 writes the trained model at the end; "
          "empty: <checkpoint-dir>/model.pt");
ABSL_FLAG(std::string, data_dir, Defaults().data_dir,
          "where the Fashion-MNIST files (*-ubyte.gz) are");
ABSL_FLAG(int64_t, epochs, Defaults().epochs, "epochs to train (>= 1)");
ABSL_FLAG(int64_t, max_steps, Defaults().max_steps,
          "stop after this many optimizer steps; 0: no limit");
ABSL_FLAG(int64_t, batch_size, Defaults().batch_size,
          "samples per batch per process (>= 1)");
ABSL_FLAG(double, lr, Defaults().lr, "learning rate (> 0)");
ABSL_FLAG(std::string, optimizer, Defaults().optimizer, "sgd, adam or adamw");
ABSL_FLAG(double, momentum, Defaults().momentum, "SGD momentum (>= 0)");
ABSL_FLAG(int64_t, warmup_steps, Defaults().warmup_steps,
          "linear learning-rate warm-up over this many steps");
ABSL_FLAG(bool, scale_lr, Defaults().scale_lr,
          "multiply the learning rate by the world size");
ABSL_FLAG(int64_t, grad_accum, Defaults().grad_accum,
          "micro-batches per optimizer step (>= 1)");
ABSL_FLAG(std::string, backend, Defaults().backend,
          "gloo, nccl or mpi; empty: nccl with CUDA, else gloo");
ABSL_FLAG(std::string, checkpoint_dir, Defaults().checkpoint_dir,
          "where ckpt-<step>.pt files go");
ABSL_FLAG(int64_t, checkpoint_every, Defaults().checkpoint_every,
          "checkpoint every N steps; 0: never on its own");
ABSL_FLAG(std::string, memory_checkpoint_dir, Defaults().memory_checkpoint_dir,
          "where in-memory checkpoints go (a tmpfs such as /dev/shm/...); empty: none");
ABSL_FLAG(std::string, memory_checkpoint_every, "auto",
          "an in-memory checkpoint every N steps (with --memory-checkpoint-dir); auto: as "
          "often as costs at most 2% of the step time, at most every 10 steps; 0: none");
ABSL_FLAG(bool, async_checkpoint, Defaults().async_checkpoint,
          "rank 0 copies the state in memory and writes the checkpoint in the "
          "background while training goes on; false: every rank waits for the write");
ABSL_FLAG(int64_t, flight_recorder, Defaults().flight_recorder,
          "collectives kept by the flight recorder (the newest 16 go with each liveness "
          "ping; a hang compares them across ranks); 0: off");
ABSL_FLAG(std::string, resume, Defaults().resume,
          "resume from this checkpoint, or 'latest' in --checkpoint-dir "
          "($FRAMEWORM_RESUME_FROM, set by the worker, wins)");
ABSL_FLAG(uint64_t, seed, Defaults().seed, "seed for data order and init");
ABSL_FLAG(int64_t, threads, Defaults().threads,
          "torch intra-op threads per process (1..1024)");
ABSL_FLAG(int64_t, nprocs, 1,
          "run N processes on this machine (launch_distributed; 1..1024)");
ABSL_FLAG(int64_t, log_every, Defaults().log_every,
          "print a step event every N steps; 0: none");
ABSL_FLAG(int64_t, synthetic_size, Defaults().synthetic_size,
          "samples in the synthetic training set (>= 1)");
ABSL_FLAG(bool, find_unused_parameters, Defaults().find_unused_parameters,
          "allow parameters that get no gradient in a step (DDP)");
ABSL_FLAG(int64_t, connect_timeout, Defaults().connect_timeout_s,
          "seconds a job's trainer waits to connect to FRAMEWORM_COORDINATOR "
          "before it fails (>= 1)");
ABSL_FLAG(std::string, device, Defaults().device,
          "one process: auto (the first GPU if CUDA is available, else the "
          "CPU), cpu or cuda; distributed nccl runs use cuda:LOCAL_RANK");

namespace frameworm {
namespace {

const FlagsConfig& Config() {
  static const auto* config = new FlagsConfig{
      "frameworm-train",
      "usage: frameworm-train [flags]\n"
      "  Trains a built-in model alone, as --nprocs local processes, as one\n"
      "  rank of a torchrun-style run (RANK, WORLD_SIZE, LOCAL_RANK,\n"
      "  MASTER_ADDR, MASTER_PORT set) or as a cluster trainer.\n"
      "  Rank 0 prints one JSON object per line; the last is\n"
      "  {\"event\":\"done\",...}. FRAMEWORM_NO_SHM=1: gradients always go\n"
      "  over the process group. Exit: 0 success, 2 bad flags, 1 failure.\n",
      {},
      {}};
  return *config;
}

std::string Dashed(const absl::CommandLineFlag& flag) {
  return absl::StrReplaceAll(flag.Name(), {{"_", "-"}});
}

// The flag's value when it is at least `min`; exits 2 otherwise.
int64_t AtLeast(const absl::Flag<int64_t>& flag, int64_t min) {
  const int64_t v = absl::GetFlag(flag);
  if (v < min) {
    FlagErrorExit(Config(), absl::StrCat("--", Dashed(absl::GetFlagReflectionHandle(flag)),
                                         " must be an integer >= ", min, ", got \"", v, "\""));
  }
  return v;
}

// Most torch threads per process: torch starts them all at once (1,024
// take about 9 s on a 2-core machine; 100,000 never finished).
constexpr int64_t kMaxThreads = 1024;

// The flag's value when it lies in [min, max]; exits 2 otherwise.
int64_t Between(const absl::Flag<int64_t>& flag, int64_t min, int64_t max) {
  const int64_t v = absl::GetFlag(flag);
  if (v < min || v > max) {
    FlagErrorExit(Config(), absl::StrCat("--", Dashed(absl::GetFlagReflectionHandle(flag)),
                                         " must be an integer between ", min, " and ", max,
                                         ", got \"", v, "\""));
  }
  return v;
}

// A factor of the optimizer (lr, momentum, weight decay): a number the
// float arithmetic of a step can hold. A larger one (1e300) would pass the
// checks and fail at the first step.
bool FloatFactor(double v, double min) {
  return v >= min && v <= std::numeric_limits<float>::max();
}

// The flag's value when it is one of `choices` (or empty, if `empty_ok`);
// exits 2 otherwise.
std::string OneOf(const absl::Flag<std::string>& flag,
                  std::initializer_list<const char*> choices, bool empty_ok = false) {
  const std::string v = absl::GetFlag(flag);
  if (empty_ok && v.empty()) return v;
  for (const char* c : choices) {
    if (v == c) return v;
  }
  const std::vector<std::string> all(choices.begin(), choices.end());
  const std::string head = absl::StrJoin(all.begin(), all.end() - 1, ", ");
  FlagErrorExit(Config(), absl::StrCat("--", Dashed(absl::GetFlagReflectionHandle(flag)),
                                       " must be ", head, " or ", all.back(), ", got \"", v,
                                       "\""));
}

// The checked flags.
TrainConfig ConfigFromFlags() {
  TrainConfig c;
  c.model = absl::GetFlag(FLAGS_model);
  if (c.model != "cnn" && c.model != "mlp") {
    std::error_code ec;
    if (c.model.empty() || !std::filesystem::is_regular_file(c.model, ec)) {
      FlagErrorExit(Config(), absl::StrCat("--model must be cnn, mlp or the path of a "
                                           "TorchScript model file, got \"", c.model,
                                           std::filesystem::exists(c.model, ec)
                                               ? "\" (not a regular file)"
                                               : "\" (no such file)"));
    }
  }
  c.dataset = OneOf(FLAGS_dataset, {"fashion-mnist", "synthetic"});
  c.data = absl::GetFlag(FLAGS_data);
  if (!c.data.empty()) c.dataset = "file";
  c.val_fraction = absl::GetFlag(FLAGS_val_fraction);
  if (!(c.val_fraction > 0 && c.val_fraction < 1)) {
    FlagErrorExit(Config(), "--val-fraction must be a number between 0 and 1 (exclusive)");
  }
  c.inputs = absl::StrSplit(absl::GetFlag(FLAGS_inputs), ',');
  for (const std::string& in : c.inputs) {
    if (in.empty()) FlagErrorExit(Config(), "--inputs must be comma-separated tensor names");
  }
  c.loss = OneOf(FLAGS_loss, {"cross_entropy", "nll", "mse", "l1", "smooth_l1", "bce_with_logits"});
  c.metrics = absl::GetFlag(FLAGS_metrics);
  c.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  if (!FloatFactor(c.weight_decay, 0)) {
    FlagErrorExit(Config(), "--weight-decay must be a number >= 0 (at most 3.4e38)");
  }
  c.clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  if (!(c.clip_grad_norm >= 0)) FlagErrorExit(Config(), "--clip-grad-norm must be a number >= 0");
  c.lr_schedule.kind = OneOf(FLAGS_lr_schedule, {"constant", "step", "cosine", "linear"});
  c.lr_schedule.step_size = absl::GetFlag(FLAGS_lr_step_size);
  c.lr_schedule.gamma = absl::GetFlag(FLAGS_lr_gamma);
  c.lr_schedule.min_lr = absl::GetFlag(FLAGS_min_lr);
  if (absl::Status s = CheckLrSchedule(c.lr_schedule); !s.ok()) {
    FlagErrorExit(Config(), absl::StrCat("--lr-schedule: ", s.message(),
                                         c.lr_schedule.kind == "step" ? " (--lr-step-size)" : ""));
  }
  c.autocast_bf16 = OneOf(FLAGS_autocast, {"off", "bf16"}) == "bf16";
  c.eval_every = AtLeast(FLAGS_eval_every, 0);
  c.monitor = absl::GetFlag(FLAGS_monitor);
  c.early_stopping_patience = AtLeast(FLAGS_early_stopping_patience, 0);
  c.keep_best = absl::GetFlag(FLAGS_keep_best);
  c.export_path = absl::GetFlag(FLAGS_export_path);
  c.data_dir = absl::GetFlag(FLAGS_data_dir);
  c.epochs = AtLeast(FLAGS_epochs, 1);
  c.max_steps = AtLeast(FLAGS_max_steps, 0);
  c.batch_size = AtLeast(FLAGS_batch_size, 1);
  c.lr = absl::GetFlag(FLAGS_lr);
  if (!(c.lr > 0) || !FloatFactor(c.lr, 0)) {
    FlagErrorExit(Config(), "--lr must be a number > 0 (at most 3.4e38)");
  }
  c.optimizer = OneOf(FLAGS_optimizer, {"sgd", "adam", "adamw"});
  c.momentum = absl::GetFlag(FLAGS_momentum);
  if (!FloatFactor(c.momentum, 0)) {
    FlagErrorExit(Config(), "--momentum must be a number >= 0 (at most 3.4e38)");
  }
  c.warmup_steps = AtLeast(FLAGS_warmup_steps, 0);
  c.scale_lr = absl::GetFlag(FLAGS_scale_lr);
  c.grad_accum = AtLeast(FLAGS_grad_accum, 1);
  c.backend = OneOf(FLAGS_backend, {"gloo", "nccl", "mpi"}, /*empty_ok=*/true);
  c.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  c.checkpoint_every = AtLeast(FLAGS_checkpoint_every, 0);
  c.async_checkpoint = absl::GetFlag(FLAGS_async_checkpoint);
  c.flight_recorder = AtLeast(FLAGS_flight_recorder, 0);
  if (c.flight_recorder > (1 << 20)) FlagErrorExit(Config(), "--flight-recorder must be at most 1048576");
  c.memory_checkpoint_dir = absl::GetFlag(FLAGS_memory_checkpoint_dir);
  if (const std::string every = absl::GetFlag(FLAGS_memory_checkpoint_every); every == "auto") {
    c.memory_checkpoint_every = -1;
  } else if (!absl::SimpleAtoi(every, &c.memory_checkpoint_every) ||
             c.memory_checkpoint_every < 0) {
    frameworm::FlagErrorExit(Config(), "--memory-checkpoint-every must be auto or a number >= 0, got '" +
                                           every + "'");
  }
  c.resume = absl::GetFlag(FLAGS_resume);
  c.seed = absl::GetFlag(FLAGS_seed);
  c.threads = Between(FLAGS_threads, 1, kMaxThreads);
  c.log_every = AtLeast(FLAGS_log_every, 0);
  c.synthetic_size = AtLeast(FLAGS_synthetic_size, 1);
  c.find_unused_parameters = absl::GetFlag(FLAGS_find_unused_parameters);
  c.device = OneOf(FLAGS_device, {"auto", "cpu", "cuda"});
  c.connect_timeout_s = AtLeast(FLAGS_connect_timeout, 1);
  return c;
}

// This process's run, with its rank environment.
int Run(TrainConfig config) {
  const EnvLookup env = ProcessEnvLookup();
  absl::StatusOr<RankEnv> rank_env = ReadRankEnv(env);
  if (!rank_env.ok()) {
    std::cerr << "frameworm-train: " << rank_env.status().message() << std::endl;
    return 1;
  }
  config.intra_node_shm = env("FRAMEWORM_NO_SHM") != "1";
  return RunTrainer(config, *rank_env, IsDistributedRun(env));
}

}  // namespace
}  // namespace frameworm

int main(int argc, char** argv) {
  using namespace frameworm;
  const std::vector<std::string> args = ParseFlagsOrExit(argc, argv, Config());
  if (!args.empty()) FlagErrorExit(Config(), absl::StrCat("unexpected argument \"", args[0], "\""));
  const TrainConfig config = ConfigFromFlags();
  const int64_t nprocs = Between(FLAGS_nprocs, 1, kMaxLaunchProcesses);
  if (nprocs > 1 || IsLaunchedChild()) {
    // The children re-execute this program with the same arguments and
    // run Run() inside this same call.
    absl::Status s = launch_distributed([&](int, int) { return Run(config); },
                                        static_cast<int>(nprocs));
    if (!s.ok()) {
      std::cerr << "frameworm-train: " << s.message() << std::endl;
      return 1;
    }
    return 0;
  }
  return Run(config);
}
