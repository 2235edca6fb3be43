#include "jobspec/job_spec.h"

#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobspec/train_flags.h"

namespace frameworm {
namespace {

using ::testing::HasSubstr;

absl::Status ParseErr(const std::string& yaml) {
  auto r = ParseJobSpecYaml(yaml, "job.yaml");
  EXPECT_FALSE(r.ok()) << "accepted:\n" << yaml;
  if (r.ok()) return absl::OkStatus();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return r.status();
}

TEST(JobSpec, FullSpecParses) {
  auto r = ParseJobSpecYaml(R"(name: mnist-ddp
entrypoint: ["frameworm-train"]
train:
  model: cnn
  dataset: fashion-mnist
  max_steps: 300
  lr: 0.01
nodes: {min: 2, max: 4}
nproc_per_node: 2
backend: gloo
env:
  OMP_NUM_THREADS: 1
  MY_FLAG: "on"
max_restarts: 3
heartbeat_timeout: 10s
priority: 5
checkpoint:
  dir: /tmp/ckpt
  every_n_steps: 100
  every_n_minutes: 2.5
  keep_last: 2
)",
                            "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::JobSpec& s = *r;
  EXPECT_EQ(s.name(), "mnist-ddp");
  ASSERT_EQ(s.entrypoint_size(), 1);
  EXPECT_EQ(s.entrypoint(0), "frameworm-train");
  EXPECT_EQ(s.train_options().at("model"), "cnn");
  EXPECT_EQ(s.train_options().at("max-steps"), "300");
  EXPECT_EQ(s.train_options().at("lr"), "0.01");
  EXPECT_EQ(s.nodes_min(), 2);
  EXPECT_EQ(s.nodes_max(), 4);
  EXPECT_EQ(s.nproc_per_node(), 2);
  EXPECT_EQ(s.backend(), "gloo");
  EXPECT_EQ(s.env().at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(s.env().at("MY_FLAG"), "on");
  EXPECT_EQ(s.max_restarts(), 3);
  EXPECT_DOUBLE_EQ(s.heartbeat_timeout_s(), 10);
  EXPECT_EQ(s.priority(), 5);
  EXPECT_EQ(s.total_steps(), 300);  // from train.max_steps
  EXPECT_EQ(s.checkpoint().dir(), "/tmp/ckpt");
  EXPECT_EQ(s.checkpoint().every_n_steps(), 100);
  EXPECT_DOUBLE_EQ(s.checkpoint().every_n_minutes(), 2.5);
  EXPECT_EQ(s.checkpoint().keep_last(), 2);
  EXPECT_FALSE(s.checkpoint().has_replicas()) << "unset: the coordinator's default (1)";
  auto none = ParseJobSpecYaml("name: x\ncheckpoint:\n  replicas: 0\n", "job.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->checkpoint().has_replicas());
  EXPECT_EQ(none->checkpoint().replicas(), 0);
  EXPECT_TRUE(ValidateJobSpec(s).ok());
}

TEST(JobSpec, DefaultsAreFilled) {
  auto r = ParseJobSpecYaml("name: tiny\nbackend:\n", "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->nodes_min(), 1);
  EXPECT_EQ(r->nodes_max(), 1);
  EXPECT_EQ(r->nproc_per_node(), 1);
  EXPECT_EQ(r->backend(), "");
  EXPECT_EQ(r->max_restarts(), 0);
  EXPECT_EQ(r->checkpoint().keep_last(), kDefaultKeepLast);
  ASSERT_EQ(r->entrypoint_size(), 1);
  EXPECT_EQ(r->entrypoint(0), "frameworm-train");
}

TEST(JobSpec, CommandStringIsSplitLikeAShell) {
  auto r = ParseJobSpecYaml(
      "name: x\nentrypoint: python3 train.py --msg 'hello world' \"a b\"\n"
      "nodes: 3\nheartbeat_timeout: 4.5\ntotal_steps: 7\n",
      "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(std::vector<std::string>(r->entrypoint().begin(),
                                       r->entrypoint().end()),
              ::testing::ElementsAre("python3", "train.py", "--msg",
                                     "hello world", "a b"));
  EXPECT_EQ(r->nodes_min(), 3);
  EXPECT_EQ(r->nodes_max(), 3);
  EXPECT_DOUBLE_EQ(r->heartbeat_timeout_s(), 4.5);
  EXPECT_EQ(r->total_steps(), 7);
  EXPECT_THAT(ParseErr("name: x\nentrypoint: python3 'oops\n").message(),
              HasSubstr("job.yaml:2: entrypoint has an unterminated quote"));
}

TEST(JobSpec, MalformedYamlNamesLine) {
  auto s = ParseErr("name: x\nnodes: [1, 2\nbackend: gloo\n");
  EXPECT_THAT(s.message(), HasSubstr("job.yaml:"));
  EXPECT_THAT(s.message(), HasSubstr("malformed YAML"));
  s = ParseErr("name: x\n  bad indent: : :\n");
  EXPECT_THAT(s.message(), HasSubstr("malformed YAML"));
}

TEST(JobSpec, EmptyOrNonMappingRefused) {
  EXPECT_THAT(ParseErr("").message(), HasSubstr("empty job spec"));
  EXPECT_THAT(ParseErr("- a\n- b\n").message(),
              HasSubstr("job.yaml:1: a job spec must be a mapping"));
}

TEST(JobSpec, UnknownFieldNamedWithLineAndSuggestion) {
  auto s = ParseErr("name: x\n\nnprocs_per_node: 2\n");
  EXPECT_EQ(s.message(),
            "job.yaml:3: unknown field 'nprocs_per_node' (did you mean "
            "'nproc_per_node'?)");
  s = ParseErr("name: x\ncheckpoint:\n  dir: /c\n  keeplast: 2\n");
  EXPECT_EQ(s.message(),
            "job.yaml:4: unknown field 'checkpoint.keeplast' (did you mean "
            "'keep_last'?)");
  s = ParseErr("name: x\nwhatever_this_is: 1\n");
  EXPECT_EQ(s.message(), "job.yaml:2: unknown field 'whatever_this_is'");
  s = ParseErr("name: x\nnodes: {min: 1, mx: 2}\n");
  EXPECT_THAT(s.message(), HasSubstr("unknown field 'nodes.mx'"));
}

TEST(JobSpec, DuplicateFieldRefused) {
  EXPECT_THAT(ParseErr("name: x\nname: y\n").message(),
              HasSubstr("job.yaml:2: duplicate field 'name'"));
}

TEST(JobSpec, NegativeNprocNamedWithLine) {
  EXPECT_EQ(ParseErr("name: x\nbackend: gloo\n\nnproc_per_node: -2\n").message(),
            "job.yaml:4: nproc_per_node must be >= 1, got -2");
}

TEST(JobSpec, WrongTypesNamedWithLine) {
  EXPECT_EQ(ParseErr("name: x\nnproc_per_node: two\n").message(),
            "job.yaml:2: nproc_per_node must be an integer, got 'two'");
  EXPECT_EQ(ParseErr("name: x\nnproc_per_node: 1.5\n").message(),
            "job.yaml:2: nproc_per_node must be an integer, got '1.5'");
  EXPECT_EQ(ParseErr("name: [a]\n").message(),
            "job.yaml:1: name must be a string, got a list");
  EXPECT_THAT(ParseErr("name: x\nenv: [A]\n").message(),
              HasSubstr("job.yaml:2: env must be a mapping"));
  EXPECT_THAT(ParseErr("name: x\nheartbeat_timeout: soon\n").message(),
              HasSubstr("job.yaml:2: heartbeat_timeout must be seconds"));
  EXPECT_THAT(ParseErr("name: x\ncheckpoint:\n  every_n_minutes: x\n").message(),
              HasSubstr("job.yaml:3: checkpoint.every_n_minutes must be a number"));
  EXPECT_THAT(ParseErr("name: x\nmax_restarts: 99999999999\n").message(),
              HasSubstr("job.yaml:2: max_restarts is out of range"));
  EXPECT_THAT(ParseErr("name: x\ntrain: {model: [a]}\n").message(),
              HasSubstr("train.model must be a scalar"));
}

// The flags the coordinator passes each rank itself are not a job's to
// set: each names the spec field to use instead.
TEST(JobSpec, TrainOptionsTheCoordinatorSetsAreRefused) {
  const struct {
    const char* yaml_key;
    const char* message;
  } cases[] = {
      {"checkpoint_dir: /etc", "train option 'checkpoint-dir' is the coordinator's to set: use "
                               "checkpoint.dir"},
      {"checkpoint-every: 5", "use checkpoint.every_n_steps"},
      {"memory_checkpoint_dir: /etc", "--memory-checkpoint-root"},
      {"memory_checkpoint_every: 5", "use checkpoint.memory_every_n_steps"},
      {"backend: gloo", "use backend"},
      {"nprocs: 4", "train option 'nprocs' is the coordinator's to set: use nproc_per_node"},
      {"resume: /etc/shadow", "resumes from the newest checkpoint the coordinator holds"},
  };
  for (const auto& c : cases) {
    absl::Status st = ParseErr(absl::StrCat("name: x\ntrain:\n  model: cnn\n  ", c.yaml_key, "\n"));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.yaml_key;
    EXPECT_THAT(st.message(), HasSubstr("job.yaml:")) << c.yaml_key;
    EXPECT_THAT(st.message(), HasSubstr(c.message)) << st.message();
  }
  // Every other flag is the job's.
  EXPECT_TRUE(ParseJobSpecYaml("name: x\ntrain:\n  async_checkpoint: false\n  lr: 0.1\n",
                               "job.yaml")
                  .ok());
}

// A misspelt train option or a value the trainer's flag cannot take is
// refused at submit, at its line, instead of failing every generation on
// the workers; what the trainer's parser takes is taken.
TEST(JobSpec, TrainOptionsAreTheTrainersFlagsWithValuesOfTheirKind) {
  const struct {
    const char* yaml;
    const char* message;
  } refused[] = {
      {"lerning_rate: 0.1", "job.yaml:4: train option 'lerning-rate' is not a frameworm-train flag"},
      {"batch_sise: 64", "train option 'batch-sise' is not a frameworm-train flag (did you mean "
                         "'batch-size'?)"},
      {"zzzzzzzz: 1", "train option 'zzzzzzzz' is not a frameworm-train flag"},
      {"help: true", "train option 'help' is not a frameworm-train flag"},
      {"flagfile: /etc/passwd", "train option 'flagfile' is not a frameworm-train flag"},
      {"batch_size: 64.5", "job.yaml:4: train option 'batch-size' must be an integer, got '64.5'"},
      {"max_steps: lots", "train option 'max-steps' must be an integer, got 'lots'"},
      {"lr: fast", "train option 'lr' must be a number, got 'fast'"},
      {"keep_best: maybe", "train option 'keep-best' must be true or false, got 'maybe'"},
      {"seed: -1", "train option 'seed' must be a non-negative integer, got '-1'"},
      {"epochs: 99999999999999999999", "train option 'epochs' must be an integer"},
      {"lr: \"1\\e[2J\"", "must be a number, got '1?[2J'"},  // no escape reaches a terminal
  };
  for (const auto& c : refused) {
    absl::Status st = ParseErr(absl::StrCat("name: x\ntrain:\n  model: cnn\n  ", c.yaml, "\n"));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_THAT(st.message(), HasSubstr(c.message)) << c.yaml;
  }
  // The coordinator applies the same rule to a spec sent without YAML.
  v1::JobSpec raw;
  raw.set_name("x");
  (*raw.mutable_train_options())["epoch"] = "2";
  EXPECT_THAT(NormalizeJobSpec(raw).status().message(),
              HasSubstr("train option 'epoch' is not a frameworm-train flag (did you mean 'epochs'?)"));
  // The same rules for the built-in trainer's flags in its entrypoint, read
  // as the trainer's parser reads them.
  const struct {
    const char* entrypoint;
    const char* message;
  } refused_args[] = {
      {"frameworm-train --batch-sise 64",
       "job.yaml:2: entrypoint argument '--batch-sise' is not a frameworm-train flag (did you mean "
       "'batch-size'?)"},
      {"frameworm-train --epochs=two", "entrypoint argument '--epochs' must be an integer, got 'two'"},
      {"frameworm-train --lr", "entrypoint argument '--lr' needs a value"},
      {"frameworm-train --model cnn extra",
       "entrypoint argument 'extra' is not a --flag (frameworm-train takes no other arguments)"},
      {"frameworm-train -- --epochs=2", "entrypoint argument '--' is not a --flag"},
      {"frameworm-train -e 2", "entrypoint argument '-e' is not a --flag"},
      {"frameworm-train --help", "entrypoint argument '--help' makes frameworm-train print and exit"},
      {"frameworm-train --resume=/etc/shadow",
       "entrypoint argument '--resume' is the coordinator's to set: each generation resumes"},
      {"frameworm-train --checkpoint_dir /etc",
       "entrypoint argument '--checkpoint-dir' is the coordinator's to set: use checkpoint.dir"},
      {"frameworm-train --keep-best=maybe", "entrypoint argument '--keep-best' must be true or false"},
      {"frameworm-train '--A=1'", "entrypoint argument '--A' is not a flag name"},
  };
  for (const auto& c : refused_args) {
    absl::Status st = ParseErr(absl::StrCat("name: x\nentrypoint: ", c.entrypoint, "\n"));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.entrypoint;
    EXPECT_THAT(st.message(), HasSubstr(c.message)) << c.entrypoint;
  }
  auto args = ParseJobSpecYaml(
      "name: x\nentrypoint: frameworm-train --model cnn --batch_size=64 --keep-best --noscale-lr "
      "--lr 0.1\n",
      "job.yaml");
  EXPECT_TRUE(args.ok()) << args.status();
  // What absl's flag parser takes passes: hex and signed integers, "yes",
  // exponents, any string.
  EXPECT_TRUE(ParseJobSpecYaml("name: x\ntrain:\n  log_every: 0x10\n  lr_step_size: -1\n"
                               "  keep_best: yes\n  lr: 1e-3\n  seed: 18446744073709551615\n"
                               "  model: /models/my net.pt\n",
                               "job.yaml")
                  .ok());
}

// A value the trainer would refuse (exit 2 on every rank, every
// generation) is refused at submit with the trainer's own words
// (jobspec/train_flags.h): ranges, choices, lists, and the rule that joins
// --lr-schedule=step to its period, across train: and the entrypoint.
TEST(JobSpec, TrainValuesOutOfRangeAreRefusedAtSubmit) {
  const struct {
    const char* yaml;
    const char* message;
  } refused[] = {
      {"lr: -1", "job.yaml:4: train option 'lr' must be a number > 0 and <= 3.40282e+38, got '-1'"},
      {"lr: 0", "train option 'lr' must be a number > 0"},
      {"lr: nan", "train option 'lr' must be a number > 0"},
      {"batch_size: 0", "job.yaml:4: train option 'batch-size' must be an integer between 1 and "
                        "16777216, got '0'"},
      {"threads: 5000", "train option 'threads' must be an integer between 1 and 1024, got '5000'"},
      {"val_fraction: 1", "train option 'val-fraction' must be a number > 0 and < 1, got '1'"},
      {"optimizer: lion", "train option 'optimizer' must be sgd, adam or adamw, got 'lion'"},
      {"device: tpu", "train option 'device' must be auto, cpu or cuda, got 'tpu'"},
      {"inputs: \"x,,y\"", "train option 'inputs' must be comma-separated names, none empty"},
      {"flight_recorder: 2000000", "must be an integer between 0 and 1048576"},
      {"lr_schedule: step", "job.yaml:4: --lr-schedule=step needs --lr-step-size >= 1, got 0"},
      {"data: mine/data.pt", "job.yaml:4: train option 'data' must be an absolute path (a job's "
                             "trainer runs in its worker's directory), got 'mine/data.pt'"},
      {"data_dir: ./fmnist", "train option 'data-dir' must be an absolute path"},
      {"export_path: out.pt", "train option 'export-path' must be an absolute path"},
  };
  for (const auto& c : refused) {
    absl::Status st = ParseErr(absl::StrCat("name: x\ntrain:\n  model: cnn\n  ", c.yaml, "\n"));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_THAT(st.message(), HasSubstr(c.message)) << c.yaml;
  }
  // A model is a built-in one or an absolute path, in train: and the
  // entrypoint alike.
  EXPECT_THAT(ParseErr("name: x\ntrain:\n  model: resnet\n").message(),
              HasSubstr("job.yaml:3: train option 'model' must be cnn, mlp, an absolute path (a "
                        "job's trainer runs in its worker's directory), got 'resnet'"));
  EXPECT_THAT(ParseErr("name: x\nentrypoint: frameworm-train --model=models/m.pt\n").message(),
              HasSubstr("entrypoint argument '--model' must be cnn, mlp, an absolute path"));
  EXPECT_TRUE(ParseJobSpecYaml("name: x\ntrain:\n  model: /models/m.pt\n  data: /d/data.pt\n"
                               "  data_dir: ''\n",
                               "job.yaml")
                  .ok());
  absl::Status st = ParseErr("name: x\nentrypoint: frameworm-train --epochs 0\n");
  EXPECT_THAT(st.message(),
              HasSubstr("job.yaml:2: entrypoint argument '--epochs' must be an integer "
                        "between 1 and 1000000, got '0'"));
  // The entrypoint's period joins train:'s schedule, and overrides its own.
  st = ParseErr("name: x\nentrypoint: frameworm-train --lr-step-size=0\ntrain:\n"
                "  lr_schedule: step\n  lr_step_size: 5\n");
  EXPECT_THAT(st.message(), HasSubstr("job.yaml:2: --lr-schedule=step needs --lr-step-size >= 1"));
  EXPECT_TRUE(ParseJobSpecYaml("name: x\nentrypoint: frameworm-train --lr-step-size=5\ntrain:\n"
                               "  lr_schedule: step\n",
                               "job.yaml")
                  .ok());
  // The ends of each range are accepted.
  auto ok = ParseJobSpecYaml("name: x\ntrain:\n  batch_size: 1\n  threads: 1024\n"
                             "  lr: 3.4028234663852886e+38\n  val_fraction: 0.999\n"
                             "  weight_decay: 0\n  clip_grad_norm: 0\n",
                             "job.yaml");
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST(JobSpec, StragglerPolicyParsesAndIsChecked) {
  auto s = ParseJobSpecYaml("name: x\non_straggler: restart_without\nstraggler_grace: 2m\n",
                            "job.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->on_straggler(), "restart_without");
  EXPECT_EQ(s->straggler_grace_s(), 120);
  EXPECT_EQ(ParseErr("name: x\non_straggler: kill\n").message(),
            "job.yaml:2: on_straggler must be warn or restart_without, got 'kill'");
  EXPECT_THAT(ParseErr("name: x\non_straggler: [warn]\n").message(),
              HasSubstr("on_straggler must be warn or restart_without, got a list"));
  EXPECT_THAT(ParseErr("name: x\nstraggler_grace: -5\n").message(),
              HasSubstr("job.yaml:2: straggler_grace must be within 0..86400 seconds, got -5"));
}

TEST(JobSpec, BadBackendWithSuggestion) {
  EXPECT_EQ(ParseErr("name: x\nbackend: glo\n").message(),
            "job.yaml:2: backend must be gloo or nccl, got 'glo' (did you mean 'gloo'?)");
  EXPECT_EQ(ParseErr("name: x\nbackend: tcp-magic\n").message(),
            "job.yaml:2: backend must be gloo or nccl, got 'tcp-magic'");
}

TEST(JobSpec, NodesMinGreaterThanMax) {
  EXPECT_EQ(ParseErr("name: x\nnodes:\n  min: 3\n  max: 2\n").message(),
            "job.yaml:4: nodes.max (2) must be >= nodes.min (3)");
  EXPECT_EQ(ParseErr("name: x\nnodes: 0\n").message(),
            "job.yaml:2: nodes.min must be >= 1, got 0");
}

TEST(JobSpec, MissingNameAndOtherValues) {
  EXPECT_EQ(ParseErr("backend: gloo\n").message(), "job.yaml: name is required");
  EXPECT_EQ(ParseErr("name: x\nmax_restarts: -1\n").message(),
            "job.yaml:2: max_restarts must be >= 0, got -1");
  EXPECT_THAT(ParseErr("name: x\nenv: {RANK: 3}\n").message(),
              HasSubstr("job.yaml:2: env variable 'RANK' is set by Frameworm"));
  EXPECT_THAT(ParseErr("name: x\nenv: {FRAMEWORM_JOB_ID: 3}\n").message(),
              HasSubstr("cannot be overridden"));
  EXPECT_THAT(ParseErr("name: x\nenv: {1BAD: 3}\n").message(),
              HasSubstr("env name '1BAD' is not a valid variable name"));
  EXPECT_THAT(ParseErr("name: x\nentrypoint: [python3]\ntrain: {model: cnn}\n")
                  .message(),
              HasSubstr("job.yaml:3: train options apply only to the built-in"));
  EXPECT_THAT(ParseErr("name: x\ncheckpoint:\n  keep_last: -1\n").message(),
              HasSubstr("job.yaml:3: checkpoint.keep_last must be >= 0"));
  EXPECT_THAT(ParseErr("name: x\ncheckpoint:\n  replicas: 9\n").message(),
              HasSubstr("job.yaml:3: checkpoint.replicas must be within 0..8, got 9"));
  EXPECT_THAT(ParseErr("name: x\ncheckpoint:\n  memory_every_n_steps: -5\n").message(),
              HasSubstr("job.yaml:3: checkpoint.memory_every_n_steps must be within 0..1000000000, got -5"));
  EXPECT_THAT(ParseErr("name: x\ncheckpoint:\n  memory_every_n_steps: 1000000001\n").message(),
              HasSubstr("memory_every_n_steps must be within 0..1000000000, got 1000000001"));
  EXPECT_THAT(ParseErr("name: x\ncheckpoint:\n  replicas: -1\n").message(),
              HasSubstr("checkpoint.replicas must be within 0..8, got -1"));
  EXPECT_THAT(ParseErr("name: a/b\n").message(),
              HasSubstr("job.yaml:1: name must not contain '/'"));
  for (const char* name : {"\"a\\eb\"", "\"a\\rb\"", "\"a\\tb\"", "\"a\\x7fb\""}) {
    EXPECT_THAT(ParseErr(absl::StrCat("name: ", name, "\n")).message(),
                HasSubstr("job.yaml:1: name must not contain '/' or control characters"))
        << name;
  }
  EXPECT_TRUE(ParseJobSpecYaml("name: \"r\xC3\xA9sum\xC3\xA9 run-1\"\n", "job.yaml").ok())
      << "UTF-8 and spaces are fine";
  EXPECT_THAT(ParseErr("name: x\nentrypoint: []\n").message(),
              HasSubstr("job.yaml:2: entrypoint is empty"));
}

TEST(JobSpec, ValidateHoldsProtoToSameRules) {
  v1::JobSpec s;
  EXPECT_EQ(ValidateJobSpec(s).message(), "name is required");
  s.set_name("x");
  s.set_nodes_min(1);
  s.set_nodes_max(1);
  s.set_nproc_per_node(-2);
  absl::Status st = ValidateJobSpec(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "nproc_per_node must be >= 1, got -2");
  s.set_nproc_per_node(1);
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  s.set_backend("nccl2");
  EXPECT_THAT(ValidateJobSpec(s).message(), HasSubstr("backend"));
  s.set_backend("nccl");
  s.set_heartbeat_timeout_s(-1);
  EXPECT_THAT(ValidateJobSpec(s).message(), HasSubstr("heartbeat_timeout"));
  // Shorter than two heartbeats: every worker would look lost.
  s.set_heartbeat_timeout_s(0.5);
  EXPECT_EQ(ValidateJobSpec(s).message(),
            "heartbeat_timeout must be 0 (the coordinator's default) or at least 2 seconds "
            "(workers heartbeat every second), got 0.5");
  s.set_heartbeat_timeout_s(2);
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  s.set_heartbeat_timeout_s(0);
  s.mutable_checkpoint()->set_every_n_steps(-5);
  EXPECT_THAT(ValidateJobSpec(s).message(),
              HasSubstr("checkpoint.every_n_steps must be within 0..281474976710656, got -5"));
  // Larger than any job's steps: the coordinator's step arithmetic would overflow.
  s.mutable_checkpoint()->set_every_n_steps(std::numeric_limits<int64_t>::max());
  EXPECT_THAT(ValidateJobSpec(s).message(),
              HasSubstr("checkpoint.every_n_steps must be within 0..281474976710656, got "
                        "9223372036854775807"));
  s.mutable_checkpoint()->set_every_n_steps(int64_t{1} << 48);
  EXPECT_TRUE(ValidateJobSpec(s).ok());
}

TEST(JobSpec, NormalizeFillsProtoDefaultsThenValidates) {
  v1::JobSpec s;
  s.set_name("x");
  absl::StatusOr<v1::JobSpec> n = NormalizeJobSpec(s);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->nproc_per_node(), 1);
  EXPECT_EQ(n->nodes_min(), 1);
  EXPECT_EQ(n->nodes_max(), 1);
  // keep_last left out of the proto: the YAML default, not "keep all".
  EXPECT_EQ(n->checkpoint().keep_last(), kDefaultKeepLast);
  {
    v1::JobSpec keep_all = s;
    keep_all.mutable_checkpoint()->set_keep_last(0);
    absl::StatusOr<v1::JobSpec> k = NormalizeJobSpec(keep_all);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ(k->checkpoint().keep_last(), 0);  // set on purpose
  }
  // Bounds a proto client could exceed.
  {
    v1::JobSpec t = s;
    t.set_heartbeat_timeout_s(kMaxHeartbeatTimeoutS + 1);
    EXPECT_THAT(NormalizeJobSpec(t).status().message(),
                HasSubstr("heartbeat_timeout must be at most 604800 seconds"));
    t.set_heartbeat_timeout_s(kMaxHeartbeatTimeoutS);
    EXPECT_TRUE(NormalizeJobSpec(t).ok());
    t.set_total_steps(kMaxTotalSteps + 1);
    EXPECT_THAT(NormalizeJobSpec(t).status().message(),
                HasSubstr("total_steps must be within 0..281474976710656"));
  }
  s.set_nodes_min(3);
  n = NormalizeJobSpec(s);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->nodes_max(), 3);  // max defaults to min
  s.set_nodes_max(2);
  EXPECT_EQ(NormalizeJobSpec(s).status().message(),
            "invalid job spec: nodes.max (2) must be >= nodes.min (3)");
  s.set_nodes_max(0);
  (*s.mutable_env())["MASTER_PORT"] = "1";
  EXPECT_EQ(NormalizeJobSpec(s).status().message(),
            "invalid job spec: env variable 'MASTER_PORT' is set by Frameworm "
            "and cannot be overridden");
  s.clear_env();
  (*s.mutable_train_options())["a=b"] = "1";
  EXPECT_THAT(NormalizeJobSpec(s).status().message(),
              HasSubstr("train option 'a=b' is not a flag name"));
}

}  // namespace
TEST(JobSpec, CheckpointDirMustBeAbsoluteWithoutDotDot) {
  EXPECT_EQ(ParseErr("name: x\ncheckpoint:\n  dir: ../../../../tmp/x\n").message(),
            "job.yaml:3: checkpoint.dir must be an absolute path, got '../../../../tmp/x'");
  EXPECT_EQ(ParseErr("name: x\ncheckpoint:\n  dir: /data/../etc\n").message(),
            "job.yaml:3: checkpoint.dir must not contain '.' or '..', got '/data/../etc'");
}

TEST(JobSpec, SizesAndNulBytesAreBounded) {
  v1::JobSpec s;
  s.set_name("x");
  s.set_nodes_min(1);
  s.set_nodes_max(1);
  s.set_nproc_per_node(1);
  ASSERT_TRUE(ValidateJobSpec(s).ok());
  v1::JobSpec big = s;
  for (int i = 0; i < 1025; ++i) big.add_entrypoint("a");
  EXPECT_THAT(ValidateJobSpec(big).message(), HasSubstr("at most 1024"));
  big = s;
  big.add_entrypoint("prog");
  big.add_entrypoint(std::string(300 << 10, 'a'));
  EXPECT_THAT(ValidateJobSpec(big).message(), HasSubstr("entrypoint is"));
  big = s;
  (*big.mutable_env())["BIG"] = std::string(300 << 10, 'v');
  EXPECT_THAT(ValidateJobSpec(big).message(), HasSubstr("env is"));
  big = s;
  (*big.mutable_env())["NUL"] = std::string("a\0b", 3);
  EXPECT_THAT(ValidateJobSpec(big).message(), HasSubstr("contains NUL"));
  // The key of a value with a NUL is quoted cut short and printable.
  big = s;
  (*big.mutable_env())[std::string(200 << 10, 'K') + "\n\x1b[2J"] = std::string("a\0b", 3);
  absl::Status nul = ValidateJobSpec(big);
  EXPECT_THAT(nul.message(), HasSubstr("contains NUL"));
  EXPECT_LT(nul.message().size(), 400u);
  EXPECT_EQ(nul.message().find('\x1b'), std::string::npos);
  big = s;
  big.add_entrypoint(std::string("pro\0g", 5));
  EXPECT_THAT(ValidateJobSpec(big).message(), HasSubstr("contains NUL"));
}

// An error quotes a bad value cut short (values may be 256 KiB).
TEST(JobSpec, ErrorsQuoteLongValuesCutShort) {
  v1::JobSpec spec;
  spec.set_name("x");
  spec.set_nodes_min(1);
  spec.set_nodes_max(1);
  spec.set_nproc_per_node(1);
  spec.set_backend(std::string(1 << 20, 'b'));
  absl::Status s = ValidateJobSpec(spec);
  EXPECT_THAT(s.message(), HasSubstr("backend must be gloo or nccl, got 'bbbb"));
  EXPECT_LT(s.message().size(), 300u);
  spec.clear_backend();
  spec.mutable_checkpoint()->set_dir("rel/" + std::string(1 << 20, 'd'));
  s = ValidateJobSpec(spec);
  EXPECT_THAT(s.message(), HasSubstr("checkpoint.dir must be an absolute path"));
  EXPECT_LT(s.message().size(), 300u);
}

TEST(JobSpec, AliasesWorkButCannotExpandPastTheBound) {
  // Ordinary use of an anchor is fine.
  auto ok = ParseJobSpecYaml("name: a\nenv: {A: &v hello, B: *v}\n", "job.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->env().at("B"), "hello");
  // A 32 KiB anchor referenced 2,000 times would copy 64 MB into the spec
  // (from a document of about 40 KiB): refused while parsing, at the
  // anchor's line (yaml-cpp marks an alias where its anchor is), before
  // the copies are made.
  std::string yaml = "name: &x " + std::string(32 << 10, 'a') + "\nentrypoint: [";
  for (int i = 0; i < 2000; ++i) yaml += i ? ", *x" : "*x";
  yaml += "]\n";
  absl::Status s = ParseErr(yaml);
  EXPECT_THAT(s.message(), HasSubstr("job.yaml:1: the job spec's strings come to more than"));
  EXPECT_THAT(s.message(), HasSubstr("alias"));
  // A wrong-typed huge scalar is quoted cut short in the error.
  s = ParseErr("name: a\nnodes: " + std::string(100000, '7') + "x\n");
  EXPECT_THAT(s.message(), HasSubstr("(100001 bytes)"));
  EXPECT_LT(s.message().size(), 400u);
}

TEST(JobSpec, SecretEnvParsesAndFollowsTheEnvRules) {
  auto r = ParseJobSpecYaml("name: x\nenv:\n  A: 1\nsecret_env:\n  HF_TOKEN: hf_abc\n", "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->secret_env().at("HF_TOKEN"), "hf_abc");
  EXPECT_EQ(r->env().count("HF_TOKEN"), 0u);
  EXPECT_EQ(ParseErr("name: x\nenv:\n  T: 1\nsecret_env:\n  T: 2\n").message(),
            "job.yaml:5: 'T' is in both env and secret_env");
  EXPECT_EQ(ParseErr("name: x\nsecret_env:\n  RANK: 2\n").message(),
            "job.yaml:3: secret_env variable 'RANK' is set by Frameworm and cannot be overridden");
  EXPECT_EQ(ParseErr("name: x\nsecret_env: [a]\n").message(),
            std::string("job.yaml:2: secret_env must be a mapping NAME: value, got a list"));
}


// Every string of a spec must be UTF-8 (proto3's rule: the coordinator
// refuses to parse a message holding one that is not, and the user saw an
// empty error). Refused by the rule list, on the YAML path and on a raw
// spec alike, naming the field; overlongs, surrogates, code points past
// U+10FFFF and cut sequences too.
TEST(JobSpec, InvalidUtf8IsRefusedNamingTheField) {
  const struct {
    std::string yaml;
    std::string message;
  } refused[] = {
      {"name: a\xff" "b\n", "job.yaml:1: name is not valid UTF-8"},
      {"name: a\xc0\xaf\n", "job.yaml:1: name is not valid UTF-8"},          // overlong '/'
      {"name: a\xe0\x80\xaf\n", "job.yaml:1: name is not valid UTF-8"},      // overlong, 3 bytes
      {"name: a\xed\xa0\x80\n", "job.yaml:1: name is not valid UTF-8"},      // a surrogate
      {"name: a\xf4\x90\x80\x80\n", "job.yaml:1: name is not valid UTF-8"},  // past U+10FFFF
      {"name: x\nenv:\n  A: \"v\xe2\x82\"\n", "job.yaml:3: env.A is not valid UTF-8"},  // cut short
      {"name: x\nsecret_env:\n  T: s3cr\xfft\n", "job.yaml:3: secret_env.T is not valid UTF-8"},
      {"name: x\nenv:\n  \"A\xff\": 1\n", "job.yaml:3: env name 'A?' is not valid UTF-8"},
      {"name: x\nentrypoint: [python3, \"t\xffrain.py\"]\n",
       "job.yaml:2: entrypoint element 1 is not valid UTF-8"},
      {"name: x\ntrain:\n  model: /m\xff.pt\n", "job.yaml:3: train.model is not valid UTF-8"},
      {"name: x\ntrain:\n  \"lr\xff\": 1\n",
       "job.yaml:3: train option name 'lr?' is not valid UTF-8"},
      {"name: x\ncheckpoint:\n  dir: /srv/\xff\n", "job.yaml:3: checkpoint.dir is not valid UTF-8"},
      {"name: x\nbackend: \"gl\xffo\"\n", "job.yaml:2: backend is not valid UTF-8"},
      {"name: x\non_straggler: \"w\xff\"\n", "job.yaml:2: on_straggler is not valid UTF-8"},
  };
  for (const auto& c : refused) {
    absl::Status st = ParseErr(c.yaml);
    EXPECT_EQ(st.message(), c.message) << c.yaml;
    EXPECT_EQ(st.message().find("s3cr"), std::string::npos) << "a secret is never quoted";
  }
  // What the coordinator applies to a spec sent without YAML.
  v1::JobSpec raw;
  raw.set_name("x\xff");
  EXPECT_EQ(NormalizeJobSpec(raw).status().message(), "invalid job spec: name is not valid UTF-8");
  raw.set_name("x");
  (*raw.mutable_train_options())["epochs"] = "\x80";
  EXPECT_EQ(ValidateJobSpec(raw).message(), "train.epochs is not valid UTF-8");
  // Well-formed UTF-8 of every length passes, up to U+10FFFF.
  auto ok = ParseJobSpecYaml(
      "name: \"r\xC3\xA9sum\xC3\xA9 \xE2\x82\xAC \xED\x9F\xBF \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF\"\n"
      "env:\n  GREETING: \"gr\xC3\xBC\xC3\x9F dich\"\n",
      "job.yaml");
  EXPECT_TRUE(ok.ok()) << ok.status();
}

// batch_size and batch-size are the same frameworm-train flag: given both,
// the second is a duplicate field, not a silent override.
TEST(JobSpec, TrainOptionSpelledBothWaysIsADuplicate) {
  EXPECT_EQ(ParseErr("name: x\ntrain:\n  batch_size: 64\n  lr: 0.1\n  batch-size: 512\n").message(),
            "job.yaml:5: duplicate field 'train.batch-size' ('batch_size' and 'batch-size' are "
            "the same frameworm-train flag, --batch-size)");
  EXPECT_THAT(ParseErr("name: x\ntrain:\n  max-steps: 5\n  max_steps: 6\n").message(),
              HasSubstr("job.yaml:4: duplicate field 'train.max_steps'"));
  auto ok = ParseJobSpecYaml("name: x\ntrain:\n  batch_size: 64\n  max-steps: 5\n", "job.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->train_options().at("batch-size"), "64");
}

// Only one YAML document is read as the spec: a second one (another job,
// or a second half the user meant to keep) is refused, not dropped.
TEST(JobSpec, MoreThanOneYamlDocumentIsRefused) {
  EXPECT_EQ(ParseErr("name: a\n---\nname: b\n").message(),
            "job.yaml:3: a second YAML document (after '---'); a job spec file holds one job, "
            "in one document");
  EXPECT_THAT(ParseErr("name: a\n...\n---\nname: b\n").message(),
              HasSubstr("job.yaml:4: a second YAML document"));
  EXPECT_THAT(ParseErr("---\n---\nname: b\n").message(), HasSubstr("a second YAML document"));
  // Inputs on which YAML::LoadAll never returned (job_spec_fuzzer's
  // timeout, fuzz/corpus/job_spec/loadall-loop): one document, refused as
  // that document is.
  for (const char* loops : {"!,", "!,\n---\n!,", "name: a\n!,"}) {
    EXPECT_FALSE(ParseJobSpecYaml(loops, "job.yaml").ok()) << loops;
  }
  // A document start marker, an end marker and a trailing "---" hold one.
  for (const char* one :
       {"---\nname: a\n", "name: a\n...\n", "name: a\n---\n", "---\nname: a\n---\n# end\n"}) {
    auto r = ParseJobSpecYaml(one, "job.yaml");
    ASSERT_TRUE(r.ok()) << one << ": " << r.status();
    EXPECT_EQ(r->name(), "a");
  }
}

// Integer flags the trainer keeps in an int stop at INT_MAX (--grad-accum
// would wrap); epochs, batch size and max steps stop far past any real run
// but before the trainer's step arithmetic or the coordinator's 2^48 step
// bound; each refused naming the option and the bound, the bound itself
// accepted.
TEST(JobSpec, TrainIntegersAreBoundedWhereTheTrainerWouldOverflow) {
  const struct {
    const char* yaml;
    const char* message;
  } refused[] = {
      {"grad_accum: 2147483648",
       "job.yaml:4: train option 'grad-accum' must be an integer between 1 and 2147483647, got "
       "'2147483648'"},
      {"grad_accum: 4294967297",
       "train option 'grad-accum' must be an integer between 1 and 2147483647"},
      {"epochs: 1000001",
       "train option 'epochs' must be an integer between 1 and 1000000, got '1000001'"},
      {"epochs: 9223372036854775807",
       "train option 'epochs' must be an integer between 1 and 1000000"},
      {"batch_size: 16777217",
       "train option 'batch-size' must be an integer between 1 and 16777216, got '16777217'"},
      {"max_steps: 281474976710657",
       "train option 'max-steps' must be an integer between 0 and 281474976710656, got "
       "'281474976710657'"},
  };
  for (const auto& c : refused) {
    absl::Status st = ParseErr(absl::StrCat("name: x\ntrain:\n  model: cnn\n  ", c.yaml, "\n"));
    EXPECT_THAT(st.message(), HasSubstr(c.message)) << c.yaml;
  }
  EXPECT_THAT(ParseErr("name: x\nentrypoint: frameworm-train --grad-accum=4294967297\n").message(),
              HasSubstr("job.yaml:2: entrypoint argument '--grad-accum' must be an integer "
                        "between 1 and 2147483647"));
  auto ok = ParseJobSpecYaml("name: x\ntrain:\n  grad_accum: 2147483647\n  epochs: 1000000\n"
                             "  batch_size: 16777216\n  max_steps: 281474976710656\n",
                             "job.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->total_steps(), int64_t{1} << 48);
}

// One argv or environment string over Linux's MAX_ARG_STRLEN (128 KiB with
// its NUL) passed submit and failed every rank with E2BIG: refused naming
// the field. An env entry counts as NAME=value, a train option as
// --name=value (what the trainer's argv holds).
TEST(JobSpec, StringsPastTheArgumentLimitAreRefused) {
  v1::JobSpec s;
  s.set_name("x");
  s.set_nodes_min(1);
  s.set_nodes_max(1);
  s.set_nproc_per_node(1);
  v1::JobSpec big = s;
  (*big.mutable_env())["BIG"] = std::string(131067, 'v');  // BIG=... is 131071 bytes
  EXPECT_TRUE(ValidateJobSpec(big).ok()) << ValidateJobSpec(big);
  (*big.mutable_env())["BIG"] += "v";
  EXPECT_EQ(ValidateJobSpec(big).message(),
            "env.BIG is 131072 bytes as NAME=value; at most 131071 (Linux's limit on one "
            "environment string, MAX_ARG_STRLEN)");
  big = s;
  (*big.mutable_secret_env())["TOKEN"] = std::string(131072, 's');
  EXPECT_THAT(ValidateJobSpec(big).message(), HasSubstr("secret_env.TOKEN is 131078 bytes"));
  big = s;
  (*big.mutable_train_options())["model"] = "/" + std::string(131062, 'm');  // --model=/mmm: 131071
  EXPECT_TRUE(ValidateJobSpec(big).ok()) << ValidateJobSpec(big);
  (*big.mutable_train_options())["model"] += "m";
  EXPECT_EQ(ValidateJobSpec(big).message(),
            "train.model is 131072 bytes as --name=value; at most 131071 (Linux's limit on one "
            "argument, MAX_ARG_STRLEN)");
  big = s;
  big.add_entrypoint("python3");
  big.add_entrypoint(std::string(131071, 'a'));
  EXPECT_TRUE(ValidateJobSpec(big).ok()) << ValidateJobSpec(big);
  big.mutable_entrypoint(1)->append("a");
  EXPECT_EQ(ValidateJobSpec(big).message(),
            "entrypoint element 1 is 131072 bytes; at most 131071 (Linux's limit on one argument, "
            "MAX_ARG_STRLEN)");
  // From YAML, at the field's line.
  EXPECT_THAT(ParseErr("name: x\nenv:\n  A: 1\n  B: " + std::string(140000, 'b') + "\n").message(),
              HasSubstr("job.yaml:4: env.B is 140002 bytes as NAME=value"));
}

// What the README promises is refused at submit is: --metrics names the
// trainer's metrics (train/objective.cc MakeMetrics), --monitor one of the
// run's validation metrics (Trainer::CheckOptions), --model is not empty.
// The table's words are the trainer's too (it checks its flags with them).
TEST(JobSpec, MetricsMonitorAndModelAreCheckedAsTheTrainerDoes) {
  const struct {
    const char* yaml;
    const char* message;
  } refused[] = {
      {"metrics: bogus",
       "job.yaml:4: train option 'metrics' must be auto, '' (empty), none or a comma-separated "
       "list of accuracy, binary_accuracy, mse, mae (each at most once), got 'bogus'"},
      {"metrics: accuracy,accuracy", "train option 'metrics' must be auto"},
      {"metrics: \"accuracy,\"", "train option 'metrics' must be auto"},
      {"metrics: auto,mae", "train option 'metrics' must be auto"},
      {"metrics: ACCURACY", "train option 'metrics' must be auto"},
      {"monitor: val_foo",
       "job.yaml:4: --monitor must name a validation metric, got 'val_foo'; there are: loss, "
       "accuracy (val_loss and val_<metric> mean the same)"},
      {"monitor: mae",
       "--monitor must name a validation metric, got 'mae'; there are: loss, accuracy "},
      {"monitor: val_", "--monitor must name a validation metric, got 'val_'"},
  };
  for (const auto& c : refused) {
    absl::Status st = ParseErr(absl::StrCat("name: x\ntrain:\n  model: cnn\n  ", c.yaml, "\n"));
    EXPECT_THAT(st.message(), HasSubstr(c.message)) << c.yaml;
  }
  // The metrics the monitor may name are the run's: its list, or auto's
  // for its loss; none leaves loss alone.
  EXPECT_THAT(ParseErr("name: x\ntrain:\n  metrics: none\n  monitor: val_accuracy\n").message(),
              HasSubstr("job.yaml:4: --monitor must name a validation metric, got 'val_accuracy'; "
                        "there are: loss ("));
  EXPECT_THAT(ParseErr("name: x\ntrain:\n  loss: mse\n  monitor: accuracy\n").message(),
              HasSubstr("there are: loss, mae ("));
  EXPECT_THAT(ParseErr("name: x\nentrypoint: frameworm-train --monitor=val_foo\n").message(),
              HasSubstr("job.yaml:2: --monitor must name a validation metric"));
  for (const char* good :
       {"metrics: auto", "metrics: none", "metrics: \"\"", "metrics: accuracy,mae",
        "metrics: mse,binary_accuracy,mae,accuracy", "monitor: loss", "monitor: val_loss",
        "monitor: accuracy", "monitor: val_accuracy", "monitor: \"\"",
        "loss: mse\n  monitor: val_mae", "loss: bce_with_logits\n  monitor: binary_accuracy",
        "metrics: mse\n  monitor: val_mse", "metrics: none\n  monitor: loss"}) {
    auto r = ParseJobSpecYaml(absl::StrCat("name: x\ntrain:\n  ", good, "\n"), "job.yaml");
    EXPECT_TRUE(r.ok()) << good << ": " << r.status();
  }
  // An empty model is neither a built-in one nor a file.
  EXPECT_EQ(ParseErr("name: x\ntrain:\n  model: \"\"\n").message(),
            "job.yaml:3: train option 'model' must be cnn, mlp, an absolute path (a job's trainer "
            "runs in its worker's directory), got ''");
  EXPECT_THAT(ParseErr("name: x\nentrypoint: frameworm-train --model=\n").message(),
              HasSubstr("entrypoint argument '--model' must be cnn, mlp, an absolute path"));
  // The trainer's own view of the same values (CheckFlagValues).
  EXPECT_EQ(CheckTrainOption("model", ""), "must be cnn, mlp or a path, got ''");
  EXPECT_EQ(CheckTrainOption("model", "relative/m.pt"), std::nullopt);
  EXPECT_EQ(CheckTrainOption("data", ""), std::nullopt);
  EXPECT_NE(CheckTrainOption("metrics", "bogus"), std::nullopt);
  EXPECT_EQ(CheckTrainOption("monitor", "anything"), std::nullopt) << "joined to --metrics";
  auto problem = CheckTrainOptionSet({{"monitor", "val_foo"}, {"metrics", "auto"}});
  ASSERT_NE(problem, std::nullopt);
  EXPECT_EQ(problem->flags.front(), "monitor");
}

// No build has MPI (LibTorch from the PyPI wheel is built without it):
// every rank refused backend mpi at its start. Refused at submit instead.
TEST(JobSpec, MpiBackendIsRefusedAtSubmit) {
  EXPECT_EQ(ParseErr("name: x\nbackend: mpi\n").message(),
            "job.yaml:2: backend mpi is not available: Frameworm's LibTorch (the PyPI wheel's) is "
            "built without MPI; use gloo or nccl (or leave backend out: nccl with GPUs, "
            "else gloo)");
  v1::JobSpec raw;
  raw.set_name("x");
  raw.set_backend("mpi");
  EXPECT_THAT(NormalizeJobSpec(raw).status().message(),
              HasSubstr("invalid job spec: backend mpi is not available"));
  for (const char* b : {"gloo", "nccl"}) {
    raw.set_backend(b);
    EXPECT_TRUE(NormalizeJobSpec(raw).ok()) << b;
  }
}

// checkpoint.dir follows the coordinator's rule (coordinator/
// checkpoint_paths.cc IsCleanAbsolutePath), so --dry-run agrees with a
// submit, with a message that says what is wrong.
TEST(JobSpec, CheckpointDirFollowsTheCoordinatorsRule) {
  EXPECT_EQ(ParseErr("name: x\ncheckpoint:\n  dir: /srv//ckpt\n").message(),
            "job.yaml:3: checkpoint.dir must not contain '//', got '/srv//ckpt'");
  for (const char* dir : {"//srv/ckpt", "/srv/ckpt//", "/srv///ckpt"}) {
    EXPECT_THAT(ParseErr(absl::StrCat("name: x\ncheckpoint:\n  dir: ", dir, "\n")).message(),
                HasSubstr("checkpoint.dir must not contain '//'"))
        << dir;
  }
  EXPECT_THAT(ParseErr("name: x\ncheckpoint:\n  dir: /srv/./ckpt\n").message(),
              HasSubstr("checkpoint.dir must not contain '.' or '..'"));
  EXPECT_EQ(ParseErr("name: x\ncheckpoint:\n  dir: /" + std::string(4096, 'd') + "\n").message(),
            "job.yaml:3: checkpoint.dir is 4097 bytes; at most 4096");
  v1::JobSpec raw;
  raw.set_name("x");
  raw.mutable_checkpoint()->set_dir(std::string("/srv/\0x", 7));
  EXPECT_EQ(ValidateJobSpec(raw).message(), "checkpoint.dir contains NUL");
  // Control characters (C1 ones too) never reach the table another user's
  // frameworm-cli checkpoints prints.
  for (const char* dir : {"\"/srv/\\e]0;pwn\\a\\e[2J\"", "\"/srv/a\\tb\"", "\"/srv/\\u009b2J\""}) {
    const absl::Status st = ParseErr(absl::StrCat("name: x\ncheckpoint:\n  dir: ", dir, "\n"));
    EXPECT_THAT(st.message(), HasSubstr("job.yaml:3: checkpoint.dir must not contain control"))
        << dir;
    EXPECT_EQ(st.message().find('\x1b'), std::string::npos);
  }
  for (const char* dir : {"/srv/ckpt", "/srv/ckpt/", "/", "/srv/.hidden/ckpt..old"}) {
    auto r = ParseJobSpecYaml(absl::StrCat("name: x\ncheckpoint:\n  dir: ", dir, "\n"), "job.yaml");
    EXPECT_TRUE(r.ok()) << dir << ": " << r.status();
  }
}

// Field names and short values in parser errors are the user's text: cut
// short and escaped, as values are (no escape sequence reaches a terminal).
TEST(JobSpec, ParserErrorsQuoteNamesEscapedAndCutShort) {
  absl::Status st = ParseErr("name: x\n\"nod\\e[2Jes\": 1\n");
  EXPECT_THAT(st.message(), HasSubstr("job.yaml:2: unknown field 'nod?[2Jes'"));
  EXPECT_EQ(st.message().find('\x1b'), std::string::npos);
  st = ParseErr("name: x\nenv:\n  \"A\\eB\": 1\n  \"A\\eB\": 2\n");
  EXPECT_EQ(st.message(), "job.yaml:4: duplicate field 'env.A?B'");
  // An explicit key ("? key"): a plain one stops at 1024 characters.
  st = ParseErr("name: x\n? " + std::string(100000, 'k') + "\n: 1\n");
  EXPECT_THAT(st.message(), HasSubstr("job.yaml:2: unknown field 'kkkk"));
  EXPECT_THAT(st.message(), HasSubstr("...'"));
  EXPECT_LT(st.message().size(), 300u);
  st = ParseErr("name: x\ncheckpoint:\n  \"d\\ni\\tr\": /c\n");
  EXPECT_THAT(st.message(), HasSubstr("unknown field 'checkpoint.d?i?r'"));
  // Short values too.
  EXPECT_EQ(ParseErr("name: x\nnproc_per_node: \"\\e[2J\"\n").message(),
            "job.yaml:2: nproc_per_node must be an integer, got '?[2J'");
  EXPECT_EQ(ParseErr("name: x\non_straggler: \"\\e[2J\"\n").message(),
            "job.yaml:2: on_straggler must be warn or restart_without, got '?[2J'");
  // A key whose value has the wrong type, escaped and cut short too.
  st = ParseErr("name: x\nenv:\n  \"\\e]0;x\\a\": [1]\n");
  EXPECT_EQ(st.message(), "job.yaml:3: env.?]0;x? must be a scalar, got a list");
  st = ParseErr("name: x\nsecret_env:\n  ? " + std::string(100000, 'k') + "\n  : [1]\n");
  EXPECT_THAT(st.message(), HasSubstr("secret_env.kkkk"));
  EXPECT_LT(st.message().size(), 300u);
}

// An integer past 64 bits is out of range, not "not an integer".
TEST(JobSpec, AnIntegerPast64BitsIsOutOfRange) {
  EXPECT_EQ(ParseErr("name: x\nnodes: 99999999999999999999\n").message(),
            "job.yaml:2: nodes is out of range, got '99999999999999999999'");
  EXPECT_THAT(ParseErr("name: x\ntotal_steps: -99999999999999999999\n").message(),
              HasSubstr("total_steps is out of range"));
  EXPECT_THAT(ParseErr("name: x\nnodes: 9x\n").message(), HasSubstr("nodes must be an integer"));
}

// A spec saved as UTF-16 or UTF-32 (which yaml-cpp would decode, and whose
// second document the marker check cannot see) is refused whole.
TEST(JobSpec, TextThatIsNotUtf8IsRefusedWhole) {
  auto utf16 = [](const std::string& ascii, bool bom) {
    std::string out = bom ? std::string("\xff\xfe") : std::string();
    for (char c : ascii) {
      out.push_back(c);
      out.push_back('\0');
    }
    return out;
  };
  for (bool bom : {true, false}) {
    const absl::Status st = ParseErr(utf16("name: a\n---\nname: b\nnodes: 64\n", bom));
    EXPECT_THAT(st.message(), HasSubstr("job.yaml: not UTF-8 text")) << bom;
  }
  EXPECT_THAT(ParseErr("\xfe\xff" "name: a\n").message(), HasSubstr("not UTF-8 text"));
  // A UTF-8 byte-order mark is UTF-8.
  auto r = ParseJobSpecYaml("\xef\xbb\xbfname: a\n", "job.yaml");
  EXPECT_TRUE(r.ok()) << r.status();
}

}  // namespace frameworm
