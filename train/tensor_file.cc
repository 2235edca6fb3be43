#include "train/tensor_file.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <new>
#include <vector>

#include <torch/csrc/jit/serialization/pickle.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace frameworm {
namespace {

std::string FirstLine(std::string s) {
  if (const size_t nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

}  // namespace

absl::StatusOr<std::map<std::string, torch::Tensor>> ReadTensorFile(const std::string& path,
                                                                    int64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("data file ", path,
                                            fs::exists(path, ec) ? " is not a regular file"
                                                                 : " does not exist"));
  }
  const auto size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("data file ", path, ": ", ec.message()));
  if (static_cast<int64_t>(size) > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("data file ", path, " has ", size,
                                                     " bytes; at most ", max_bytes,
                                                     " are read into memory"));
  }
  std::vector<char> bytes;
  try {
    bytes.resize(size);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("data file ", path, " has ", size,
                                                     " bytes, more than this host can allocate"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(size))) {
    return absl::NotFoundError(absl::StrCat("data file ", path, " cannot be read"));
  }
  c10::IValue v;
  try {
    v = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data file ", path,
        " is not a file written by torch.save({\"x\": ..., \"y\": ...}, path): ",
        FirstLine(e.what())));
  }
  if (!v.isGenericDict()) {
    return absl::InvalidArgumentError(absl::StrCat("data file ", path, " holds a ", v.tagKind(),
                                                   ", not a dict of tensors"));
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& kv : v.toGenericDict()) {
    if (!kv.key().isString()) {
      return absl::InvalidArgumentError(absl::StrCat("data file ", path, " has a key of type ",
                                                     kv.key().tagKind(), "; keys must be strings"));
    }
    const std::string key = kv.key().toStringRef();
    if (!kv.value().isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat("data file ", path, ": '", key, "' holds a ",
                                                     kv.value().tagKind(), ", not a tensor"));
    }
    torch::Tensor t = kv.value().toTensor();
    if (t.is_sparse() || t.dim() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data file ", path, ": '", key, "' must be a dense tensor of samples along dim 0"));
    }
    out[key] = t.contiguous();
  }
  return out;
}

absl::StatusOr<TensorFileData> DatasetFromTensorFile(const std::string& path, int64_t max_bytes) {
  auto tensors = ReadTensorFile(path, max_bytes);
  if (!tensors.ok()) return tensors.status();
  std::vector<std::string> keys;
  for (const auto& [k, t] : *tensors) keys.push_back(k);
  auto pick = [&](const std::string& suffix) -> absl::StatusOr<std::optional<Dataset>> {
    auto x = tensors->find("x" + suffix), y = tensors->find("y" + suffix);
    if (x == tensors->end() && y == tensors->end() && !suffix.empty()) return std::nullopt;
    for (const char* need : {"x", "y"}) {
      if (tensors->count(need + suffix) == 0) {
        return absl::InvalidArgumentError(absl::StrCat("data file ", path, " has no '", need,
                                                       suffix, "' tensor; it has: ",
                                                       absl::StrJoin(keys, ", ")));
      }
    }
    Dataset d;
    d.images = x->second;
    d.labels = y->second;
    const int64_t n = d.labels.size(0);
    if (n == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("data file ", path, ": 'y", suffix, "' has no samples"));
    }
    for (const auto& [k, t] : *tensors) {
      const bool val_key = k.size() > 4 && k.compare(k.size() - 4, 4, "_val") == 0;
      if (val_key != !suffix.empty()) continue;
      if (t.size(0) != n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data file ", path, ": '", k, "' has ", t.size(0), " samples along dim 0 but 'y",
            suffix, "' has ", n, "; every tensor must have one row per sample"));
      }
      const std::string base = suffix.empty() ? k : k.substr(0, k.size() - 4);
      if (base != "x" && base != "y") d.inputs[base] = t;
    }
    return std::optional<Dataset>(std::move(d));
  };
  auto train = pick("");
  if (!train.ok()) return train.status();
  auto val = pick("_val");
  if (!val.ok()) return val.status();
  TensorFileData out;
  out.train = std::move(**train);
  out.val = std::move(*val);
  if (out.val && out.val->inputs.size() != out.train.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data file ", path, ": the validation set must have the same inputs as the training set"));
  }
  return out;
}

absl::StatusOr<std::pair<Dataset, Dataset>> SplitDataset(const Dataset& d, double fraction) {
  if (!(fraction > 0 && fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the validation fraction must be between 0 and 1, not ", fraction));
  }
  const int64_t n = d.size();
  const int64_t nv = static_cast<int64_t>(std::llround(fraction * static_cast<double>(n)));
  if (nv < 1 || nv >= n) {
    return absl::InvalidArgumentError(absl::StrCat("cannot hold out a fraction ", fraction, " of ",
                                                   n, " samples: each side needs one"));
  }
  auto part = [&](int64_t start, int64_t len) {
    Dataset p;
    p.images = d.images.narrow(0, start, len);
    p.labels = d.labels.narrow(0, start, len);
    for (const auto& [k, t] : d.inputs) p.inputs[k] = t.narrow(0, start, len);
    return p;
  };
  return std::make_pair(part(0, n - nv), part(n - nv, nv));
}

}  // namespace frameworm
