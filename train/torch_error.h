// The text of an exception thrown by LibTorch, for an error message: a
// c10::Error's message without the C++ stack trace that what() appends
// (27 lines of "frame #N: ..." that bury the one line a user needs);
// what() of any other exception.
//
// Thread safety: a pure function.
#ifndef FRAMEWORM_TRAIN_TORCH_ERROR_H_
#define FRAMEWORM_TRAIN_TORCH_ERROR_H_

#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace frameworm {

inline std::string TorchMessage(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_TORCH_ERROR_H_
