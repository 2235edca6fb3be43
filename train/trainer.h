// Trainer, DistributedTrainer and DataParallelTrainer: the seed's API in C++.
//
//   frameworm::Trainer trainer(model, optimizer, torch::kCPU);
//   absl::Status s = trainer.train(train_loader, val_loader);
//   trainer.state().val_metrics["accuracy"];
//
//   frameworm::setup_distributed();               // reads torchrun's env
//   auto t = frameworm::DistributedTrainer::Create(model, optimizer, {});
//   (*t)->train(train_loader, val_loader);       // DDP over c10d
//   (*t)->save_checkpoint("ckpt.pt");            // rank 0 writes, all wait
//   (*t)->save_checkpoint_async("ckpt.pt", 7);   // rank 0 copies, writes later
//   frameworm::cleanup_distributed();
//
// The loss and the metrics are TrainerOptions::loss and ::metrics
// (train/objective.h; default cross-entropy over class logits and
// "accuracy"). One "step" is one optimizer step
// (gradient_accumulation_steps micro-batches). Metrics: train_metrics holds
// the last epoch's sample-weighted mean "loss" and each metric by name,
// val_metrics the last evaluation's; in a DistributedTrainer both are
// averaged across ranks weighted by sample count, so they are global on
// every rank.
//
// Thread safety: a trainer is used from one thread. setup_distributed /
// cleanup_distributed / default_process_group guard the process-wide group
// with a mutex.
#ifndef FRAMEWORM_TRAIN_TRAINER_H_
#define FRAMEWORM_TRAIN_TRAINER_H_

#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "train/checkpoint_file.h"
#include "train/checkpoint_snapshot.h"
#include "train/data.h"
#include "train/launch.h"
#include "train/lr_schedule.h"
#include "train/objective.h"
#include "train/process_group.h"
#include "train/reducer.h"

namespace frameworm {

// Any module with `Tensor forward(Tensor)`: a ModuleHolder such as
// torch::nn::Sequential or a TORCH_MODULE, or an AnyModule.
class Model {
 public:
  template <typename M>
  Model(torch::nn::ModuleHolder<M> m)  // NOLINT: implicit by design
      : module_(m.ptr()),
        forward_([p = m.ptr()](const torch::Tensor& x) -> torch::Tensor {
          return p->forward(x);
        }) {}
  Model(torch::nn::AnyModule m)  // NOLINT
      : module_(m.ptr()),
        forward_([m](const torch::Tensor& x) mutable -> torch::Tensor {
          return m.forward(x);
        }) {}
  std::shared_ptr<torch::nn::Module> ptr() const { return module_; }
  torch::Tensor forward(const torch::Tensor& x) const { return forward_(x); }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::function<torch::Tensor(const torch::Tensor&)> forward_;
};

struct TrainerState {
  int64_t epoch = 0;           // current epoch (completed epochs at the end)
  int64_t step = 0;            // optimizer steps completed
  int64_t batch_in_epoch = 0;  // micro-batches of `epoch` already consumed
  std::map<std::string, double> train_metrics;
  std::map<std::string, double> val_metrics;
};

struct StepInfo {
  int64_t step = 0;   // 1-based, after the step
  int64_t epoch = 0;
  int64_t samples = 0;  // this rank's samples in the step
  double loss = 0;      // this rank's mean loss
  // This rank's mean of each of TrainerOptions::metrics, by name.
  std::map<std::string, double> metrics;
  double seconds = 0;   // wall time of the step (train_step)
  double lr = 0;
  // Of `seconds`, the time blocked waiting for the gradient collectives
  // (DDP: the reducer's Finalize, where a fast rank waits for a slow one).
  double wait_seconds = 0;
  // Before the step: fetching its batches (fit's loop; 0 from train_step).
  double data_seconds = 0;
};

struct StepAction {
  bool checkpoint = false;
  bool stop = false;
};

struct TrainerOptions {
  int64_t epochs = 1;
  int64_t max_steps = 0;  // 0: no limit
  int gradient_accumulation_steps = 1;
  int64_t warmup_steps = 0;  // linear warmup from lr/warmup to lr
  // After warmup (train/lr_schedule.h): constant, step, cosine or linear.
  LrSchedule lr_schedule;
  // What is minimized and what is reported (train/objective.h).
  LossFn loss = CrossEntropyLoss();
  std::vector<NamedMetric> metrics = ClassifierMetrics();
  // Runs the model on one batch; null: model.forward(batch.data). For a
  // model whose forward takes several inputs (batch.inputs holds the
  // dataset's other tensors by name).
  std::function<torch::Tensor(Model&, const Batch&)> forward;
  // Clip the gradients to this total L2 norm (as torch.nn.utils.
  // clip_grad_norm_) after they are averaged across ranks, before the
  // optimizer step; 0: no clipping.
  double clip_grad_norm = 0;
  // Mixed precision: the forward pass and the loss run under
  // torch::autocast with this dtype on the trainer's device (CUDA; on the
  // CPU, CPU autocast). Only torch::kBFloat16 (float16 would need loss
  // scaling): train() refuses any other with INVALID_ARGUMENT.
  std::optional<torch::ScalarType> autocast;
  // Evaluate on the validation loader every N steps besides each epoch's
  // end (0: at epoch ends only).
  int64_t eval_every = 0;
  // The validation metric that early stopping and the best checkpoint
  // watch ("loss" or a metric's name, with or without "val_"; empty:
  // "loss"; any other name is refused before training), and whether
  // higher is better (unset: only for names containing "accuracy").
  std::string monitor;
  std::optional<bool> monitor_higher_is_better;
  // Stop once the monitored metric has not improved for this many
  // evaluations in a row (0: never). Rank 0's decision is broadcast.
  int64_t early_stopping_patience = 0;
  // After each evaluation that improves the monitored metric, rank 0
  // writes <checkpoint_dir>/ckpt-best.pt (synchronously; a failed write is
  // a line on stderr, never the end of training). Retention and
  // resume-from-latest never touch it.
  bool keep_best = false;
  int64_t log_every = 0;     // rank 0 prints a step line every N steps
  bool verbose = true;       // rank 0 prints per-epoch lines
  std::string checkpoint_dir;    // <dir>/ckpt-<step>.pt
  // Steps; 0: never (except on request). With it, train() also checkpoints
  // its last step when that is no multiple, unless that step has a
  // checkpoint already (one on request, or the one it was resumed from in
  // checkpoint_dir: never written twice).
  int64_t checkpoint_every = 0;
  // Called on every rank after every step (after the step's eval_every
  // evaluation, when it has one). Only rank 0's answer counts in a
  // DistributedTrainer when sync_step_actions is set: it is broadcast (one
  // tiny collective per step: a barrier in the intra-node shared memory
  // when the gradients go there, else the process group) so all ranks act
  // at the same step. An error ends train() with that error.
  std::function<absl::StatusOr<StepAction>(const StepInfo&)> on_step;
  bool sync_step_actions = false;
  // With sync_step_actions, 0 broadcasts every step. A share > 0 spaces
  // the broadcasts (train/step_action_gap.h): rank 0 measures each one and
  // sends with it the step of the next, so that a broadcast costs at most
  // this share of the steps between (e.g. 0.01: 1%) and those steps take
  // at most step_action_max_delay_seconds. What rank 0's on_step answers
  // at a step without a broadcast is kept (or-ed) for the next one: a
  // checkpoint asked at step s is then taken at that later step, a stop
  // comes after it.
  double step_action_sync_share = 0;
  double step_action_max_delay_seconds = 0.05;
  // Called on every rank, from the training thread, when the action agreed
  // for a step (after the broadcast; checkpoint_every counts) is a
  // checkpoint or a stop, before it is carried out. May be null.
  std::function<void(const StepInfo&, const StepAction&)> on_action;
  // Checkpoints taken by train() (checkpoint_every, a StepAction, the
  // final one) are asynchronous: rank 0 blocks only while the state is
  // copied in memory (parameters, buffers, RNG; the optimizer's SGD, Adam,
  // AdamW, Adagrad and RMSprop state is handed over and the optimizer goes
  // on with copies; with checkpoint_copy_during_step, host parameters and
  // optimizer state are copied by the background thread during the next
  // step's forward and backward instead, and that step's optimizer update
  // waits for the copy if it is not done); serialization, checksum, write,
  // fsync and rename run on a background thread, and the other ranks do not
  // wait for it (until the end of train(), which returns on every rank once
  // the last save is durable). At most
  // one save is in flight: a checkpoint due while one is written waits for
  // it (nothing is skipped). train() returns only after the last save is
  // durable. A write that fails for any reason but a full disk ends train()
  // with that error at the next step; a full disk skips that checkpoint,
  // except the final one (taken when the last step is not a multiple of
  // checkpoint_every), which fails train() with RESOURCE_EXHAUSTED. Any other optimizer is serialized in
  // memory before training goes on (the write is still in the background).
  // Memory: one copy of the state (parameters and buffers in host memory,
  // the optimizer's state where it lives) stays allocated between saves;
  // the next snapshot copies into it, which costs a fraction of fresh pages.
  // false: every checkpoint as save_checkpoint (rank 0 writes, all wait).
  bool async_checkpoint = true;
  // With async_checkpoint: copy host parameters and optimizer state while
  // the next step's forward and backward run (only buffers and the RNG
  // state are copied before save_checkpoint_async returns). Until the copy
  // is done, the next train_step's optimizer update, load_checkpoint, a
  // save and wait_for_snapshot() wait for it; code of yours that changes
  // parameters or optimizer state in place between steps must call
  // wait_for_snapshot() first. false: everything is copied before
  // save_checkpoint_async returns.
  bool checkpoint_copy_during_step = true;
  // In-memory checkpoints (rank 0, with async_checkpoint): every
  // `memory_checkpoint_every` steps (-1: automatic; 0: none) the snapshot
  // is written to <memory_checkpoint_dir>/ckpt-<step>.pt (meant for a
  // tmpfs: memory outside this process); one due while a save is still in
  // flight is put off (never waited for) to the first step that finds none
  // (but not to within half an interval of a checkpoint_every disk step:
  // that save would wait for it), and a disk checkpoint at or after its
  // step replaces it (the next is the next multiple after the disk one's
  // step, or an automatic interval after it). Automatic: the next one
  // comes max(10, ceil((blocked + background) / (0.02 x mean step time)))
  // steps after the last (train/memory_cadence.h): `blocked` how long its
  // snapshot held training, `background` how long the last in-memory
  // save's copy and write ran beside training (they share the cores and
  // memory bandwidth), so snapshots cost about 2% of the step time. A failed write skips
  // that checkpoint (a line on stderr), never ends training. Reported
  // through on_checkpoint like disk checkpoints (the path tells them apart).
  std::string memory_checkpoint_dir;
  int64_t memory_checkpoint_every = 0;
  // Called on rank 0 after each checkpoint is complete (durable): on the
  // checkpoint thread when async_checkpoint (so it may run concurrently with
  // on_step and on_progress, and may take its time: training goes on), on
  // the training thread otherwise.
  std::function<void(int64_t step, const std::string& path,
                     const CheckpointFileInfo& info)>
      on_checkpoint;
  // Called from the training thread during work that makes no steps (each
  // evaluation batch, before a checkpoint is written), so a supervisor can
  // tell a long evaluation from a hung rank. Must be cheap; may be null.
  std::function<void()> on_progress;
  // Called on rank 0 when a checkpoint was skipped because the disk is full
  // (training goes on; the previous checkpoint stays). May be null. On the
  // checkpoint thread when async_checkpoint, like on_checkpoint.
  std::function<void(int64_t step, const std::string& why)> on_checkpoint_skipped;
};

class Trainer {
 public:
  Trainer(Model model,
          std::shared_ptr<torch::optim::Optimizer> optimizer,
          torch::Device device = torch::kCPU, TrainerOptions options = {});
  // Waits for a checkpoint still being written.
  virtual ~Trainer();

  // Trains from state() (epoch/batch position, so a loaded checkpoint
  // resumes mid-epoch) until options.epochs or max_steps, evaluating on
  // val_loader after each epoch and at the end. In a DistributedTrainer its
  // end is collective: every rank returns once rank 0's last checkpoint is
  // durable (ABORTED on the others when rank 0's failed). Errors: from the
  // step hook, checkpoints or collectives; c10::Error is converted to
  // INTERNAL.
  absl::Status train(DataLoader& train_loader, DataLoader& val_loader);

  // One optimizer step over the given micro-batches (gradients accumulated,
  // synchronised only after the last one in a DistributedTrainer).
  absl::StatusOr<StepInfo> train_step(const std::vector<Batch>& micro_batches);

  // Sample-weighted (global in a DistributedTrainer) loss and accuracy.
  absl::StatusOr<std::map<std::string, double>> evaluate(DataLoader& loader);

  // Rank 0 writes model parameters and buffers, optimizer state and trainer
  // state (epoch, step, position in the epoch, RNG) atomically with a
  // checksum; other ranks wait at a barrier. Returns the file's size and
  // checksum (on every rank, as broadcast is not needed: others get bytes 0).
  // Waits for an asynchronous save in flight first.
  absl::StatusOr<CheckpointFileInfo> save_checkpoint(const std::string& path);
  // Rank 0 snapshots the state and returns; the file is written in the
  // background (see TrainerOptions::async_checkpoint; on_checkpoint or
  // on_checkpoint_skipped tell the outcome). Other ranks return at once, so
  // an error is rank 0's alone: in a DistributedTrainer every rank calls
  // wait_for_checkpoint() (collective) whatever this returned.
  // Errors: a failure of the previous asynchronous save, or of the
  // snapshot; UNAVAILABLE when no thread can be created to write it.
  absl::Status save_checkpoint_async(const std::string& path, int64_t step);
  // Waits until no asynchronous save is in flight; returns (and forgets) the
  // failure of the last one, if any (a full disk is not a failure). In a
  // DistributedTrainer it is collective, like save_checkpoint: every rank
  // returns once rank 0's save is durable, so each may then load it; the
  // other ranks get ABORTED when rank 0's write failed.
  absl::Status wait_for_checkpoint();
  // The step of the asynchronous save to a path outside
  // memory_checkpoint_dir (a disk checkpoint) still being written, or
  // reported through on_checkpoint, 0: none. Thread-safe.
  int64_t disk_checkpoint_in_flight() const { return disk_save_step_.load(); }
  // Waits until the asynchronous save in flight, if any, holds its own copy
  // of parameters and optimizer state (see checkpoint_copy_during_step);
  // its write may still be going on.
  void wait_for_snapshot();
  // Seconds this trainer's thread has waited in wait_for_snapshot() (the
  // optimizer updates, loads and saves that waited for a copy), in total.
  double snapshot_wait_seconds() const { return snapshot_wait_seconds_; }
  // Every rank loads. Errors: NOT_FOUND, DATA_LOSS (truncated, corrupt),
  // INVALID_ARGUMENT (does not fit this model/optimizer). On error nothing
  // is changed. A checkpoint saved by a world of another size resumes at
  // the same share of the epoch (batch_in_epoch x saved world / world,
  // rounded down: a few samples may be seen twice, none skipped); step and
  // epoch carry over.
  absl::Status load_checkpoint(const std::string& path);

  const TrainerState& state() const { return state_; }
  TrainerState& mutable_state() { return state_; }
  TrainerOptions& options() { return options_; }
  Model& model() { return model_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  torch::Device device() const { return device_; }
  // How long the training thread has been blocked in a collective (the
  // gradient allreduce, or a metric or step-action one; 0: not blocked
  // there now). Safe from
  // any thread: a liveness thread reports it, so a hang names the rank the
  // others wait for.
  double collective_wait_seconds() const;
  // This rank's collective flight recorder (null: a single process, or
  // DistributedOptions::flight_recorder_entries 0). Safe from any thread.
  virtual const FlightRecorder* flight_recorder() const { return nullptr; }
  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }
  // Learning rate of parameter group 0 at step s (0-based) after scaling,
  // warmup and the schedule.
  double lr_at(int64_t step) const;
  // Best value of the monitored metric so far (nullopt before an evaluation).
  std::optional<double> best_metric() const { return best_; }

 protected:
  virtual void PrepareBackward(bool /*sync*/) {}
  virtual absl::Status FinishBackward(bool /*sync*/) { return absl::OkStatus(); }
  // `what` (a string literal) names the collective in the flight recorder.
  virtual absl::StatusOr<std::vector<double>> AllreduceSum(
      std::vector<double> v, const char* /*what*/) {
    return v;
  }
  // Rank 0's value, on every rank (identity in a single process).
  virtual absl::StatusOr<std::vector<int64_t>> BroadcastFromRank0(
      std::vector<int64_t> v, const char* /*what*/) {
    return v;
  }
  virtual void PrepareLoaders(DataLoader& /*train*/, DataLoader& /*val*/) {}
  void ScaleBaseLr(double factor);
  // Rank 0: waits for its save in flight and returns the failure of the
  // last one (forgotten once returned); not collective (the other ranks
  // have nothing in flight).
  absl::Status JoinCheckpointWrite();
  // While one lives, the training thread counts as blocked in a collective
  // (collective_wait_seconds): the gradient allreduce, and the small
  // metric and step-action collectives, where a rank also waits for a
  // stopped peer.
  class CollectiveWait {
   public:
    explicit CollectiveWait(Trainer& t) : t_(t) {
      t_.waiting_since_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                                 std::memory_order_relaxed);
    }
    ~CollectiveWait() { t_.waiting_since_ns_.store(0, std::memory_order_relaxed); }
    CollectiveWait(const CollectiveWait&) = delete;
    CollectiveWait& operator=(const CollectiveWait&) = delete;

   private:
    Trainer& t_;
  };

  Model model_;
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  torch::Device device_;
  TrainerOptions options_;
  TrainerState state_;
  std::vector<double> base_lr_;  // per param group

 private:
  absl::Status TrainImpl(DataLoader& train_loader, DataLoader& val_loader);
  double GroupLr(size_t group, int64_t step) const;
  // Runs after each evaluation: best checkpoint, early stopping. Returns
  // true when training is to stop.
  absl::StatusOr<bool> AfterEvaluation();
  absl::Status CheckOptions() const;
  // The validation metric options_.monitor names ("loss" when empty; a
  // "val_" prefix dropped), or nullopt when it names none.
  std::optional<std::string> MonitoredMetric() const;
  torch::Tensor Forward(const Batch& b);
  Batch OnDevice(const Batch& b) const;
  absl::StatusOr<bool> AfterStep(const StepInfo& info);
  // Rank 0's action for this step on every rank (sync_step_actions), or no
  // action at a step without a broadcast (step_action_sync_share).
  absl::StatusOr<StepAction> SyncStepAction(const StepInfo& info, const StepAction& mine);
  // Saves ckpt-<step>.pt (asynchronously unless options_.async_checkpoint
  // is false) and reports it through on_checkpoint.
  absl::Status CheckpointAt(int64_t step);
  std::string CheckpointPath(int64_t step) const;
  // True for a path in options_.memory_checkpoint_dir.
  bool IsMemoryPath(const std::string& path) const;
  // Rank 0: an in-memory checkpoint when one is due and no save is in
  // flight (TrainerOptions::memory_checkpoint_every). Returns the failure
  // of the save before it, if any (which ends training); its own failure
  // only skips it.
  absl::Status MaybeMemoryCheckpoint(const StepInfo& info);
  // Reports a finished save (event line, on_checkpoint or
  // on_checkpoint_skipped); returns the failure to keep, if any. Calls no
  // virtual function (the checkpoint thread may run it while a derived
  // trainer is being destroyed; ~Trainer joins that thread).
  absl::Status Finished(bool rank0, int64_t step, const std::string& path,
                        const absl::StatusOr<CheckpointFileInfo>& result);

  // The failure of the last background save, forgotten once returned.
  absl::Status CheckpointFailure();
  // Rank 0, before its first save (asynchronous or not): removes the
  // temporary files of writers that died in options_.checkpoint_dir
  // (RemoveStaleCheckpointTemps). Only rank 0: on a shared filesystem
  // another host's live writer has a pid this host does not know.
  void CleanCheckpointTempsOnce();
  // Collective: rank 0's `outcome` on every rank (the others' own `mine`
  // when that failed): OK, RESOURCE_EXHAUSTED, or ABORTED naming `what`.
  absl::Status Rank0Outcome(const absl::Status& mine, const std::string& what);
  CheckpointPosition Position() const;

  std::mutex ckpt_mu_;
  std::thread ckpt_thread_;        // the save in flight (rank 0)
  absl::Status ckpt_error_;        // guarded by ckpt_mu_
  int64_t skipped_step_ = -1;      // guarded by ckpt_mu_: the last full-disk skip
  // The last written snapshot, whose memory the next one reuses; guarded
  // by ckpt_mu_.
  std::unique_ptr<CheckpointSnapshot> ckpt_spare_;
  bool temps_cleaned_ = false;
  // The step of the last disk checkpoint train() took, or of the one
  // loaded from where train() would write it; -1: none.
  int64_t last_checkpoint_step_ = -1;
  bool memory_temps_cleaned_ = false;
  std::atomic<bool> ckpt_busy_{false};  // a save is in flight (rank 0)
  std::atomic<int64_t> disk_save_step_{0};  // disk_checkpoint_in_flight()
  std::condition_variable ckpt_cv_;     // ckpt_copying_ became false
  bool ckpt_copying_ = false;           // guarded by ckpt_mu_: deferred copies not made yet
  double copy_seconds_ = 0;             // guarded by ckpt_mu_: the last deferred copy's time
  // Guarded by ckpt_mu_: the last in-memory save's copy and write, from its
  // thread's start to the file's end (-1: none yet; the report after it is
  // not counted: a coordinator away would stretch it).
  double memory_background_seconds_ = -1;
  double snapshot_wait_seconds_ = 0;    // training thread
  double take_seconds_ = 0;             // the last snapshot's blocking time
  std::atomic<int64_t> waiting_since_ns_{0};  // steady clock; 0: not waiting
  double mean_step_seconds_ = 0;        // moving average (memory cadence, action spacing)
  // Spaced step-action broadcasts (step_action_sync_share > 0): the step
  // of the next one (0: the next step), rank 0's answers since the last
  // one, and rank 0's moving average of a broadcast's time (the step's is
  // mean_step_seconds_).
  int64_t next_action_sync_step_ = 0;
  StepAction pending_action_;
  double action_sync_seconds_ = 0;
  int64_t next_memory_step_ = 0;        // the next in-memory one is due (0: unset)
  int64_t memory_interval_ = 10;        // the automatic cadence's last interval (steps)
  int64_t schedule_total_ = 0;          // steps the schedule spans (train())
  std::optional<double> best_;          // the monitored metric's best value
  int64_t evaluations_since_best_ = 0;
};

struct DistributedOptions {
  std::string backend;  // "nccl" | "gloo" | "mpi"; empty: DefaultBackend()
  bool find_unused_parameters = false;
  double bucket_cap_mb = 25;
  int gradient_accumulation_steps = 1;
  // The process group's (when Create sets one up: setup_distributed), the
  // intra-node allreduce's and its collectives' timeout.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  bool scale_lr = false;  // lr x world_size (opt-in)
  // Gloo on CPU with every rank on this machine (the rank environment's
  // local_world_size == world_size: LOCAL_WORLD_SIZE as torchrun,
  // launch_distributed and the worker set it, WORLD_SIZE when unset):
  // average float32 gradients through an intra-node shared-memory
  // allreduce (ShmAllreduce) instead of Gloo over loopback. If its setup
  // fails on any rank (e.g. a rank on another machine cannot map rank 0's
  // segment), every rank falls back to the process group and one line goes
  // to stderr. false: always the process group.
  bool intra_node_shm = true;
  // Records kept by the collective flight recorder (train/flight_recorder.h);
  // 0 turns it off.
  size_t flight_recorder_entries = 256;
  // Process group to use; null: the default group of setup_distributed(),
  // created from the environment if there is none yet.
  c10::intrusive_ptr<c10d::Backend> process_group;
  TrainerOptions trainer;
};

class DistributedTrainer : public Trainer {
 public:
  // Broadcasts rank 0's parameters and buffers and builds the reducer.
  // Errors: UNIMPLEMENTED for "mpi" (lists the available backends),
  // INVALID_ARGUMENT/FAILED_PRECONDITION for a bad backend or environment,
  // UNAVAILABLE when the process group cannot be formed.
  static absl::StatusOr<std::unique_ptr<DistributedTrainer>> Create(
      Model model,
      std::shared_ptr<torch::optim::Optimizer> optimizer,
      DistributedOptions options);

  // Waits for a checkpoint still being written, while the process group
  // and reducer still exist (an on_checkpoint callback may use them); not
  // collective (a peer may be gone).
  ~DistributedTrainer() override { (void)JoinCheckpointWrite(); }

  int rank() const override { return pg_->getRank(); }
  int world_size() const override { return pg_->getSize(); }
  const c10::intrusive_ptr<c10d::Backend>& process_group() const { return pg_; }
  Reducer& reducer() { return *reducer_; }
  // True when gradients go through the intra-node shm allreduce.
  bool intra_node_active() const { return reducer_->intra_node_buckets() > 0; }
  const FlightRecorder* flight_recorder() const override {
    return recorder_->capacity() > 0 ? recorder_.get() : nullptr;
  }

 protected:
  void PrepareBackward(bool sync) override;
  absl::Status FinishBackward(bool sync) override;
  absl::StatusOr<std::vector<double>> AllreduceSum(std::vector<double> v,
                                                   const char* what) override;
  absl::StatusOr<std::vector<int64_t>> BroadcastFromRank0(std::vector<int64_t> v,
                                                          const char* what) override;
  void PrepareLoaders(DataLoader& train, DataLoader& val) override;

 private:
  DistributedTrainer(Model model,
                     std::shared_ptr<torch::optim::Optimizer> optimizer,
                     torch::Device device, DistributedOptions options,
                     c10::intrusive_ptr<c10d::Backend> pg);
  absl::Status BroadcastInitialState();
  // Issues a collective with `issue` and waits for it, recorded in
  // recorder_ (a no-op there when it is off); rethrows the wait's error.
  void Recorded(const char* op, const char* what, int64_t bytes,
                const std::function<c10::intrusive_ptr<c10d::Work>()>& issue);

  DistributedOptions doptions_;
  c10::intrusive_ptr<c10d::Backend> pg_;
  std::shared_ptr<FlightRecorder> recorder_;  // shared with reducer_
  // Its intra-node allreduce (when it has one) also carries the small
  // broadcasts (BroadcastFromRank0).
  std::unique_ptr<Reducer> reducer_;
};

// One process, several GPUs: the returned module splits each batch across
// `devices` (default: all CUDA devices) with torch::nn::parallel::
// data_parallel. With fewer than two devices it runs the model as is and
// prints one log line saying so.
class DataParallelTrainer {
 public:
  static torch::nn::AnyModule wrap(torch::nn::Sequential model,
                                   std::vector<torch::Device> devices = {});
};

// setup_distributed: reads the rank environment (ParseRankEnv over
// `lookup`, by default the process environment) and creates the
// process-wide default process group. `timeout` bounds the rendezvous
// (every rank must arrive within it) and each collective (torch's default,
// 30 minutes).
// Errors: as ParseRankEnv and CreateProcessGroup.
inline constexpr std::chrono::milliseconds kDefaultDistributedTimeout = std::chrono::minutes(30);
absl::Status setup_distributed(const std::string& backend = "",
                               std::chrono::milliseconds timeout = kDefaultDistributedTimeout);
absl::Status setup_distributed(const std::string& backend, const EnvLookup& lookup,
                               std::chrono::milliseconds timeout = kDefaultDistributedTimeout);
void cleanup_distributed();
// The group created by setup_distributed (null if none).
c10::intrusive_ptr<c10d::Backend> default_process_group();

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_TRAINER_H_
