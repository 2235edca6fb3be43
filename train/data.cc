#include "train/data.h"

#include <zlib.h>

#include <ATen/CPUGeneratorImpl.h>

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "train/trainer.h"  // default_process_group

namespace frameworm {

namespace {

// `rank` or `world` as given, or (kFromProcessGroup) the default group's.
std::pair<int, int> RankAndWorld(int rank, int world) {
  if (rank != DistributedSampler::kFromProcessGroup &&
      world != DistributedSampler::kFromProcessGroup) {
    return {rank, world};
  }
  const c10::intrusive_ptr<c10d::Backend> pg = default_process_group();
  const int group_rank = pg ? pg->getRank() : 0;
  const int group_world = pg ? pg->getSize() : 1;
  return {rank == DistributedSampler::kFromProcessGroup ? group_rank : rank,
          world == DistributedSampler::kFromProcessGroup ? group_world : world};
}

}  // namespace

DistributedSampler::DistributedSampler(int64_t size, int rank, int world_size,
                                       bool shuffle, uint64_t seed,
                                       bool drop_last)
    : DistributedSampler(size, RankAndWorld(rank, world_size), shuffle, seed, drop_last) {}

DistributedSampler::DistributedSampler(int64_t size, std::pair<int, int> rank_and_world,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : size_(size),
      rank_(rank_and_world.first),
      world_size_(rank_and_world.second),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  TORCH_CHECK(world_size_ >= 1, "DistributedSampler: world_size must be >= 1");
  TORCH_CHECK(rank_ >= 0 && rank_ < world_size_,
              "DistributedSampler: rank ", rank_, " outside [0, ", world_size_, ")");
  TORCH_CHECK(size >= 0, "DistributedSampler: negative size");
  if (drop_last_ && size_ % world_size_ != 0) {
    num_samples_ = (size_ - world_size_ + world_size_ - 1) / world_size_;
    if (size_ < world_size_) num_samples_ = 0;
  } else {
    num_samples_ = (size_ + world_size_ - 1) / world_size_;
  }
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  all.reserve(size_);
  if (shuffle_) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ + epoch_);
    torch::Tensor perm = torch::randperm(size_, gen, torch::kLong);
    const int64_t* p = perm.data_ptr<int64_t>();
    all.assign(p, p + size_);
  } else {
    for (int64_t i = 0; i < size_; ++i) all.push_back(i);
  }
  const int64_t total = total_size();
  if (!drop_last_) {
    const int64_t n = static_cast<int64_t>(all.size());
    for (int64_t i = 0; static_cast<int64_t>(all.size()) < total && n > 0; ++i) {
      all.push_back(all[i % n]);
    }
  } else {
    all.resize(total);
  }
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(all[i]);
  return mine;
}

namespace {

absl::StatusOr<std::string> ReadGz(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("dataset file ", path, " does not exist"));
  }
  if (!S_ISREG(st.st_mode)) {  // a device would be read forever
    return absl::NotFoundError(absl::StrCat("dataset file ", path, " is not a regular file"));
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot open dataset file ", path));
  }
  std::string out;
  char buf[1 << 16];
  while (true) {
    int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      return absl::DataLossError(
          absl::StrCat("dataset file ", path, " is corrupt: ", msg));
    }
    if (n == 0) break;
    out.append(buf, n);
  }
  gzclose(f);
  return out;
}

uint32_t BE32(const std::string& s, size_t off) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + off);
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

}  // namespace

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir,
                                         const std::string& split) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test") {
    prefix = "t10k";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown Fashion-MNIST split \"", split, "\" (train|test)"));
  }
  const std::string ipath = absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte.gz");
  const std::string lpath = absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte.gz");
  auto img = ReadGz(ipath);
  if (!img.ok()) return img.status();
  auto lab = ReadGz(lpath);
  if (!lab.ok()) return lab.status();
  if (img->size() < 16 || BE32(*img, 0) != 2051) {
    return absl::DataLossError(absl::StrCat(
        "dataset file ", ipath, " is not an IDX image file (bad header)"));
  }
  if (lab->size() < 8 || BE32(*lab, 0) != 2049) {
    return absl::DataLossError(absl::StrCat(
        "dataset file ", lpath, " is not an IDX label file (bad header)"));
  }
  const int64_t n = BE32(*img, 4), rows = BE32(*img, 8), cols = BE32(*img, 12);
  const int64_t nl = BE32(*lab, 4);
  if (rows != 28 || cols != 28) {
    return absl::DataLossError(absl::StrCat("dataset file ", ipath, " has ",
                                            rows, "x", cols, " images, expected 28x28"));
  }
  if (static_cast<int64_t>(img->size()) != 16 + n * rows * cols) {
    return absl::DataLossError(absl::StrCat(
        "dataset file ", ipath, " is truncated: ", img->size(),
        " bytes for ", n, " images"));
  }
  if (static_cast<int64_t>(lab->size()) != 8 + nl) {
    return absl::DataLossError(absl::StrCat(
        "dataset file ", lpath, " is truncated: ", lab->size(), " bytes for ",
        nl, " labels"));
  }
  if (n != nl) {
    return absl::DataLossError(absl::StrCat("dataset files ", ipath, " and ", lpath,
                                            " disagree: ", n, " images, ", nl, " labels"));
  }
  for (int64_t i = 0; i < nl; ++i) {
    if (static_cast<unsigned char>((*lab)[8 + i]) > 9) {
      return absl::DataLossError(absl::StrCat("dataset file ", lpath,
                                              " has label > 9 at index ", i));
    }
  }
  Dataset d;
  auto raw = torch::from_blob(img->data() + 16, {n, 1, rows, cols}, torch::kUInt8);
  d.images = raw.to(torch::kFloat32).div_(255.0).sub_(0.2860).div_(0.3530);
  d.labels = torch::from_blob(lab->data() + 8, {n}, torch::kUInt8).to(torch::kInt64);
  return d;
}

Dataset MakeSyntheticDataset(int64_t size, uint64_t seed) {
  // The class prototypes are the same for every seed (so a validation set
  // made with another seed has the same classes); the samples differ.
  auto pgen = at::make_generator<at::CPUGeneratorImpl>(20240601);
  torch::Tensor protos = torch::randn({10, 1, 28, 28}, pgen);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  Dataset d;
  d.labels = torch::randint(0, 10, {size}, gen, torch::kLong);
  d.images = protos.index_select(0, d.labels) +
             0.8 * torch::randn({size, 1, 28, 28}, gen);
  return d;
}

DataLoader::DataLoader(Dataset dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)),
      options_(options),
      sampler_(dataset_.size(), 0, 1, options.shuffle, options.seed,
               options.drop_last) {
  TORCH_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be >= 1");
  Refresh();
}

void DataLoader::set_distributed(int rank, int world_size) {
  const int64_t epoch = sampler_.epoch();
  sampler_ = DistributedSampler(dataset_.size(), rank, world_size,
                                options_.shuffle, options_.seed,
                                options_.drop_last);
  sampler_.set_epoch(epoch);
  Refresh();
}

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch == sampler_.epoch() && order_.defined()) return;
  sampler_.set_epoch(epoch);
  Refresh();
}

void DataLoader::Refresh() {
  std::vector<int64_t> idx = sampler_.indices();
  order_ = torch::tensor(idx, torch::kLong);
}

int64_t DataLoader::num_batches() const {
  const int64_t n = order_.size(0);
  return (n + options_.batch_size - 1) / options_.batch_size;
}

Batch DataLoader::batch(int64_t i) const {
  const int64_t n = order_.size(0);
  const int64_t start = i * options_.batch_size;
  TORCH_CHECK(i >= 0 && start < n, "DataLoader: batch ", i, " out of range");
  const int64_t len = std::min(options_.batch_size, n - start);
  torch::Tensor idx = order_.narrow(0, start, len);
  Batch b{dataset_.images.index_select(0, idx), dataset_.labels.index_select(0, idx), {}};
  for (const auto& [name, t] : dataset_.inputs) b.inputs[name] = t.index_select(0, idx);
  return b;
}

}  // namespace frameworm
