// Datasets from tensor files users write in Python, read without Python:
//
//   torch.save({"x": features, "y": targets}, "train.pt")
//
// (the zip format torch.save writes by default). The file holds a dict of
// tensors, each with the same number of samples along dim 0: `x` is the
// model's input, `y` the target, any other tensor a further named input
// (Dataset::inputs). Optional "x_val"/"y_val" (and "<name>_val" for each
// further input) are the validation set; otherwise SplitDataset holds out
// the last fraction of the samples.
//
// Thread safety: free functions.
#ifndef FRAMEWORM_TRAIN_TENSOR_FILE_H_
#define FRAMEWORM_TRAIN_TENSOR_FILE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "train/data.h"

namespace frameworm {

// The file's dict of tensors. Refuses files over `max_bytes` (they are read
// into memory whole). Errors, each naming the file: NOT_FOUND; RESOURCE_
// EXHAUSTED (too large); INVALID_ARGUMENT: not written by torch.save, not
// a dict of str -> tensor (names the offending key and what it holds).
absl::StatusOr<std::map<std::string, torch::Tensor>> ReadTensorFile(
    const std::string& path, int64_t max_bytes = int64_t{16} << 30);

// The training set (and the validation set when the file has x_val/y_val)
// of a file's tensors. Errors: INVALID_ARGUMENT naming the file and the
// problem: no "x" or "y", a tensor whose first dimension differs from
// y's, an empty set, sparse or non-contiguous-able tensors.
struct TensorFileData {
  Dataset train;
  std::optional<Dataset> val;
};
absl::StatusOr<TensorFileData> DatasetFromTensorFile(const std::string& path,
                                                     int64_t max_bytes = int64_t{16} << 30);

// Holds out the last round(fraction x N) samples (at least one each side).
// Errors: INVALID_ARGUMENT for a fraction outside (0, 1) or a set too
// small to split.
absl::StatusOr<std::pair<Dataset, Dataset>> SplitDataset(const Dataset& d, double fraction);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_TENSOR_FILE_H_
