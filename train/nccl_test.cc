// NCCL backend on a real GPU (label "nccl"; skipped without CUDA).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "train/launch.h"
#include "train/models.h"
#include "train/process_group.h"
#include "train/trainer.h"

namespace frameworm {
namespace {

TEST(NcclTest, OneRankAllreduceAndDistributedStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  ProcessGroupOptions o;
  o.backend = "nccl";
  o.master_port = *port;
  auto pg = CreateProcessGroup(o);
  ASSERT_TRUE(pg.ok()) << pg.status();
  std::vector<torch::Tensor> t{torch::ones({1024}, torch::kCUDA) * 3};
  (*pg)->allreduce(t)->wait();
  EXPECT_EQ(t[0].sum().item<double>(), 3 * 1024);

  torch::manual_seed(0);
  auto model = MakeCnn();
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.05).momentum(0.9));
  DistributedOptions d;
  d.backend = "nccl";
  d.process_group = *pg;
  auto trainer = DistributedTrainer::Create(model, opt, d);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_TRUE((*trainer)->device().is_cuda());
  Batch b{torch::randn({32, 1, 28, 28}), torch::randint(0, 10, {32}, torch::kLong)};
  auto info = (*trainer)->train_step({b});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GT(info->loss, 0);
}

}  // namespace
}  // namespace frameworm
