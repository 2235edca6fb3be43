// Limits a worker's registration must keep, shared by the coordinator,
// which refuses a registration beyond them (INVALID_ARGUMENT), and the
// worker, which refuses such flags at start instead of retrying a
// registration that can never succeed.
//
// Thread safety: constants.
#ifndef FRAMEWORM_COMMON_WORKER_LIMITS_H_
#define FRAMEWORM_COMMON_WORKER_LIMITS_H_

namespace frameworm {

// Trainers one worker runs at once (RegisterWorkerRequest.slots: 1..this).
inline constexpr int kMaxWorkerSlots = 4096;

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_WORKER_LIMITS_H_
