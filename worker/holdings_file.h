// The checkpoint copies a worker holds, kept in a file of its work dir so
// that a restarted worker still knows them: it reports them at
// registration, and the coordinator either counts it as a holder again
// (the record is there; the hold's secret shows it was asked) or tells it
// to drop them (the record went while it was down). Without the file a
// restart forgot every copy, and nothing ever deleted them (on /dev/shm,
// RAM).
//
// Format: one line per copy, "v1", job id, step, bytes, checksum, copied
// (0/1), the secret and the path hex-encoded, tab-separated. Written to a
// temporary file and renamed (common/replace_file.h), so a crash leaves the
// old list or the new.
#ifndef FRAMEWORM_WORKER_HOLDINGS_FILE_H_
#define FRAMEWORM_WORKER_HOLDINGS_FILE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/checkpoint_holdings.h"

namespace frameworm {

absl::Status WriteHoldingsFile(const std::string& path, const std::vector<HeldCheckpoint>& held);

// What WriteHoldingsFile wrote, keeping only lines that parse, pass
// CheckHold and name a regular file still of the recorded size (at most
// kMaxHeldCheckpoints); no file is an empty list. Errors: the file exists
// but cannot be read.
absl::StatusOr<std::vector<HeldCheckpoint>> ReadHoldingsFile(const std::string& path);

// A hex-encoded field of the worker's state files (this one and
// worker/fetch_journal.h): false, and `bytes` untouched, unless `hex` is
// an even number of hex digits.
bool DecodeHexField(absl::string_view hex, std::string* bytes);

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_HOLDINGS_FILE_H_
