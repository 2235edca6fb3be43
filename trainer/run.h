// One frameworm-train process's run: a built-in model (mlp, cnn) or a
// TorchScript model saved from Python, on Fashion-MNIST, a synthetic
// dataset or a tensor file saved from Python, alone or as one rank of a
// distributed run, reporting to the coordinator when it is a cluster
// trainer (its rank environment names a coordinator). main.cc reads the
// command line and the environment; everything after is here.
//
// Output on rank 0: one JSON object per line ({"event":"start",...},
// {"event":"resumed",...}, {"event":"epoch",...}, {"event":"step",...} with
// log_every, {"event":"checkpoint",...}); the last line is
// {"event":"done",...}.
//
// Thread safety: RunTrainer is called once per process, from one thread.
#ifndef FRAMEWORM_TRAINER_RUN_H_
#define FRAMEWORM_TRAINER_RUN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/rank_env.h"
#include "train/lr_schedule.h"

namespace frameworm {

// What to train and how: frameworm-train's flags, checked. These defaults
// are the flags' defaults (main.cc says what each one means and allows).
struct TrainConfig {
  std::string model = "cnn";  // cnn, mlp or a TorchScript file's path
  std::string dataset = "fashion-mnist";  // fashion-mnist, synthetic, file (`data`)
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  // A tensor file (train/tensor_file.h); its validation set, else the
  // last `val_fraction` of it.
  std::string data;
  double val_fraction = 0.1;
  // The data file's tensors passed to the model's forward, in order.
  std::vector<std::string> inputs = {"x"};
  std::string loss = "cross_entropy";
  std::string metrics = "auto";  // comma-separated; auto: DefaultMetrics(loss)
  double weight_decay = 0;
  double clip_grad_norm = 0;
  LrSchedule lr_schedule;
  bool autocast_bf16 = false;
  int64_t eval_every = 0;
  std::string monitor;  // empty: loss
  int64_t early_stopping_patience = 0;
  bool keep_best = false;
  // Where rank 0 writes the trained TorchScript model (script models
  // only); empty: <checkpoint_dir>/model.pt.
  std::string export_path;
  int64_t epochs = 1;
  int64_t max_steps = 0;
  int64_t batch_size = 64;  // per process
  double lr = 0.05;
  std::string optimizer = "sgd";
  double momentum = 0.9;
  int64_t warmup_steps = 0;
  bool scale_lr = false;
  int64_t grad_accum = 1;
  std::string backend;  // empty: nccl with CUDA, else gloo
  std::string checkpoint_dir = "checkpoints";
  int64_t checkpoint_every = 0;
  // Rank 0 snapshots in memory and writes in the background (false: all
  // ranks wait for the write; TrainerOptions::async_checkpoint).
  bool async_checkpoint = true;
  // Collectives kept by the flight recorder (DistributedOptions::
  // flight_recorder_entries); 0: off.
  int64_t flight_recorder = 256;
  // In-memory checkpoints (TrainerOptions::memory_checkpoint_dir/every;
  // -1: automatic).
  std::string memory_checkpoint_dir;
  int64_t memory_checkpoint_every = -1;
  std::string resume;  // a path, "latest" or empty
  uint64_t seed = 0;
  int64_t threads = 1;
  int64_t log_every = 0;
  int64_t synthetic_size = 2048;
  bool find_unused_parameters = false;
  std::string device = "auto";  // one process: auto, cpu or cuda
  // A job's trainer that cannot connect to FRAMEWORM_COORDINATOR within
  // this many seconds fails at start, naming the address.
  int64_t connect_timeout_s = 15;
  // Distributed runs on one machine: average gradients in shared memory
  // (false: always over the process group; FRAMEWORM_NO_SHM=1).
  bool intra_node_shm = true;
};

// Trains as `config` says. `env`: this process's rank environment
// (ReadRankEnv); `distributed`: the process is one rank of a distributed
// run (IsDistributedRun) and forms its process group from the environment.
// A non-empty env.resume_from overrides config.resume. Returns the
// process's exit code: 0 on success, 1 on any failure with one line
// "frameworm-train: <why>" on stderr.
int RunTrainer(const TrainConfig& config, const RankEnv& env, bool distributed);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAINER_RUN_H_
