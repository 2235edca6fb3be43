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
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "jobspec/train_flags.h"
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
          "gloo or nccl (no build has MPI); empty: nccl with CUDA, else gloo");
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

// Every flag's value against the values jobspec/train_flags.h's table
// accepts (the same rules a job's train: options meet at submit), then the
// rules that join flags; exits 2 at the first problem.
void CheckFlagValues() {
  std::map<std::string, std::string> values;
  for (const TrainFlag& f : TrainFlags()) {
    const absl::CommandLineFlag* flag =
        absl::FindCommandLineFlag(absl::StrReplaceAll(f.name, {{"-", "_"}}));
    if (flag == nullptr) continue;  // TrainFlagsTableIsTheTrainers fails on it
    std::string value = flag->CurrentValue();
    if (auto problem = CheckTrainOption(f.name, value)) {
      FlagErrorExit(Config(), absl::StrCat("--", f.name, " ", *problem));
    }
    values.emplace(f.name, std::move(value));
  }
  if (auto problem = CheckTrainOptionSet(values)) FlagErrorExit(Config(), problem->message);
}

// The checked flags.
TrainConfig ConfigFromFlags() {
  CheckFlagValues();
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
  c.dataset = absl::GetFlag(FLAGS_dataset);
  c.data = absl::GetFlag(FLAGS_data);
  if (!c.data.empty()) c.dataset = "file";
  c.val_fraction = absl::GetFlag(FLAGS_val_fraction);
  c.inputs = absl::StrSplit(absl::GetFlag(FLAGS_inputs), ',');
  c.loss = absl::GetFlag(FLAGS_loss);
  c.metrics = absl::GetFlag(FLAGS_metrics);
  c.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  c.clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  c.lr_schedule.kind = absl::GetFlag(FLAGS_lr_schedule);
  c.lr_schedule.step_size = absl::GetFlag(FLAGS_lr_step_size);
  c.lr_schedule.gamma = absl::GetFlag(FLAGS_lr_gamma);
  c.lr_schedule.min_lr = absl::GetFlag(FLAGS_min_lr);
  c.autocast_bf16 = absl::GetFlag(FLAGS_autocast) == "bf16";
  c.eval_every = absl::GetFlag(FLAGS_eval_every);
  c.monitor = absl::GetFlag(FLAGS_monitor);
  c.early_stopping_patience = absl::GetFlag(FLAGS_early_stopping_patience);
  c.keep_best = absl::GetFlag(FLAGS_keep_best);
  c.export_path = absl::GetFlag(FLAGS_export_path);
  c.data_dir = absl::GetFlag(FLAGS_data_dir);
  c.epochs = absl::GetFlag(FLAGS_epochs);
  c.max_steps = absl::GetFlag(FLAGS_max_steps);
  c.batch_size = absl::GetFlag(FLAGS_batch_size);
  c.lr = absl::GetFlag(FLAGS_lr);
  c.optimizer = absl::GetFlag(FLAGS_optimizer);
  c.momentum = absl::GetFlag(FLAGS_momentum);
  c.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  c.scale_lr = absl::GetFlag(FLAGS_scale_lr);
  c.grad_accum = absl::GetFlag(FLAGS_grad_accum);
  c.backend = absl::GetFlag(FLAGS_backend);
  c.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  c.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  c.async_checkpoint = absl::GetFlag(FLAGS_async_checkpoint);
  c.flight_recorder = absl::GetFlag(FLAGS_flight_recorder);
  c.memory_checkpoint_dir = absl::GetFlag(FLAGS_memory_checkpoint_dir);
  if (const std::string every = absl::GetFlag(FLAGS_memory_checkpoint_every); every == "auto") {
    c.memory_checkpoint_every = -1;
  } else {
    // An integer >= 0, checked above by the flag table's parser (which takes
    // 0x10 as 16): parsed by the same one.
    std::string unused;
    absl::ParseFlag(every, &c.memory_checkpoint_every, &unused);
  }
  c.resume = absl::GetFlag(FLAGS_resume);
  c.seed = absl::GetFlag(FLAGS_seed);
  c.threads = absl::GetFlag(FLAGS_threads);
  c.log_every = absl::GetFlag(FLAGS_log_every);
  c.synthetic_size = absl::GetFlag(FLAGS_synthetic_size);
  c.find_unused_parameters = absl::GetFlag(FLAGS_find_unused_parameters);
  c.device = absl::GetFlag(FLAGS_device);
  c.connect_timeout_s = absl::GetFlag(FLAGS_connect_timeout);
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
  const int64_t nprocs = absl::GetFlag(FLAGS_nprocs);  // 1..kMaxLaunchProcesses: checked
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
