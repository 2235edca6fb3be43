// Numbers and named values in the JSON lines that the trainers print
// (frameworm-train's step, eval and done events). Torch-free.
#ifndef FRAMEWORM_TRAIN_JSON_VALUES_H_
#define FRAMEWORM_TRAIN_JSON_VALUES_H_

#include <map>
#include <string>
#include <vector>

namespace frameworm {

// `v` with `digits` significant digits (printf %g). JSON has no NaN or
// infinity: a diverged value is null.
std::string JsonNumber(double v, int digits);

// ,"<prefix><name>":<value> for each name of `order` that `values` holds,
// in that order (names it lacks are left out; names not in `order` too).
std::string JsonValues(const std::string& prefix, const std::map<std::string, double>& values,
                       const std::vector<std::string>& order, int digits);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_JSON_VALUES_H_
