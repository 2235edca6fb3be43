#include "train/json_values.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace frameworm {
namespace {

TEST(JsonValuesTest, NumbersKeepTheirDigitsAndNonFiniteIsNull) {
  EXPECT_EQ(JsonNumber(0.123456789012, 9), "0.123456789");
  EXPECT_EQ(JsonNumber(0.123456789012, 6), "0.123457");
  EXPECT_EQ(JsonNumber(std::nan(""), 9), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity(), 6), "null");
  EXPECT_EQ(JsonNumber(-std::numeric_limits<double>::infinity(), 6), "null");
}

TEST(JsonValuesTest, ValuesFollowTheOrderAndSkipMissingAndUnlistedNames) {
  const std::map<std::string, double> m = {{"loss", 0.5}, {"accuracy", 0.25}, {"extra", 1}};
  EXPECT_EQ(JsonValues("val_", m, {"loss", "f1", "accuracy"}, 6),
            ",\"val_loss\":0.5,\"val_accuracy\":0.25");
  EXPECT_EQ(JsonValues("", m, {}, 6), "");
  EXPECT_EQ(JsonValues("", {{"loss", std::nan("")}}, {"loss"}, 9), ",\"loss\":null");
}

}  // namespace
}  // namespace frameworm
