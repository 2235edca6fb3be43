// The coordinator fuzzer's input: a program of calls, each one record
//   [op: 1 byte][length: 2 bytes, little-endian][payload: length bytes]
// where the payload is the binary protobuf of that op's request (op % kOps
// picks the handler; a truncated record ends the program). Shared by the
// fuzzer and the seed writer so seeds stay in the format the fuzzer reads.
#ifndef FRAMEWORM_FUZZ_PROGRAM_H_
#define FRAMEWORM_FUZZ_PROGRAM_H_

#include <cstdint>
#include <string>
#include <vector>

namespace frameworm::fuzz {

enum Op : uint8_t {
  kSubmit = 0,           // JobSpec
  kRegister = 1,         // RegisterWorkerRequest (then its session attaches)
  kWorkerMessage = 2,    // WorkerMessage; empty session_id: the last session
  kReportStep = 3,       // StepMetrics; empty token: the rank's real token
  kReportCheckpoint = 4, // CheckpointRecord; empty token: rank 0's real token, empty
                         // checksum: a well-formed one
  kGetJob = 5,           // GetJobRequest
  kCancelJob = 6,        // CancelJobRequest
  kLogs = 7,             // GetLogsRequest (CheckLogRequest, then a read)
  kTick = 8,             // payload length = seconds the clock advances
  kRequestCheckpoint = 9,  // RequestCheckpointRequest
  kMetrics = 10,         // GetMetricsRequest
  kLists = 11,           // ListCheckpointsRequest (and ListJobs, ListWorkers)
  kDetach = 12,          // the last session detaches
  kTakeCommands = 13,    // the last session's commands
  kOps = 14,
};

struct Call {
  uint8_t op;
  std::string payload;
};

inline std::string Encode(const std::vector<Call>& calls) {
  std::string out;
  for (const Call& c : calls) {
    const size_t n = c.payload.size() > 0xffff ? 0xffff : c.payload.size();
    out.push_back(static_cast<char>(c.op));
    out.push_back(static_cast<char>(n & 0xff));
    out.push_back(static_cast<char>(n >> 8));
    out.append(c.payload, 0, n);
  }
  return out;
}

inline std::vector<Call> Decode(const uint8_t* data, size_t size) {
  std::vector<Call> calls;
  size_t i = 0;
  while (i + 3 <= size) {
    const uint8_t op = data[i] % kOps;
    const size_t n = data[i + 1] | (static_cast<size_t>(data[i + 2]) << 8);
    i += 3;
    if (i + n > size) break;
    calls.push_back({op, std::string(reinterpret_cast<const char*>(data + i), n)});
    i += n;
  }
  return calls;
}

}  // namespace frameworm::fuzz

#endif  // FRAMEWORM_FUZZ_PROGRAM_H_
