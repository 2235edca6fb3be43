// A small state file replaced whole: the contents go to "<path>.tmp.<pid>",
// which is then renamed over `path`, so a crash leaves the old file or the
// new one, never a torn one. (Not fsynced: for state that only saves work
// after a crash, such as a worker's holdings and fetch notes.)
//
// Errors: INTERNAL naming the file that could not be written or renamed;
// `path` is then unchanged and the temporary file gone.
// Thread safety: free function; one writer per path at a time.
#ifndef FRAMEWORM_COMMON_REPLACE_FILE_H_
#define FRAMEWORM_COMMON_REPLACE_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace frameworm {

absl::Status ReplaceFile(const std::string& path, const std::string& contents);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_REPLACE_FILE_H_
