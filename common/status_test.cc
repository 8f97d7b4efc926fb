#include "common/status.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "common/check.h"

namespace tandem {
namespace {

TEST(StatusTest, OkHasNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, FactoriesSetCodeAndPredicates) {
  EXPECT_TRUE(Status::Unavailable("x").IsUnavailable());
  EXPECT_TRUE(Status::DataLoss("x").IsDataLoss());
  EXPECT_TRUE(Status::Aborted("x").IsAborted());
  EXPECT_FALSE(Status::Aborted("x").IsUnavailable());
  EXPECT_EQ(Status::InvalidArgument("bad key").ToString(), "INVALID_ARGUMENT: bad key");
}

TEST(StatusTest, WithContextPrefixesAndKeepsCode) {
  Status s = Status::NotFound("row 7").WithContext("pull shard 2");
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_EQ(s.message(), "pull shard 2: row 7");
  EXPECT_TRUE(Status::Ok().WithContext("ctx").ok());
}

StatusOr<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  TANDEM_ASSIGN_OR_RETURN(int h, Half(x));
  TANDEM_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(StatusTest, MacrosPropagateErrors) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Quarter(6, &out);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(s.message(), "odd");
}

TEST(StatusTest, StatusOrFromOkStatusIsAnError) {
  StatusOr<int> v(Status::Ok());
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInternal);
}

// Reading the value of an error is a bug: it must stop the process naming the error, not read
// an empty optional.
TEST(StatusDeathTest, ValueOfAnErrorAbortsWithItsMessage) {
  StatusOr<std::string> v(Status::NotFound("no shard 3"));
  EXPECT_DEATH((void)v.value(), "TANDEM_CHECK.*NOT_FOUND: no shard 3");
  const StatusOr<std::string>& c = v;
  EXPECT_DEATH((void)c.value(), "no shard 3");
  EXPECT_DEATH((void)std::move(v).value(), "no shard 3");
}

TEST(StatusTest, ValueOfAnOkStatusOrIsTheValue) {
  StatusOr<std::string> v(std::string("row"));
  EXPECT_EQ(v.value(), "row");
  EXPECT_EQ(std::move(v).value(), "row");
}

TEST(CheckDeathTest, FailedCheckNamesFileLineConditionAndDetail) {
  const int rows = 3;
  EXPECT_DEATH(TANDEM_CHECK(rows == 4) << "rows " << rows,
               "status_test.cc:[0-9]+: TANDEM_CHECK\\(rows == 4\\) failed: rows 3");
  TANDEM_CHECK(rows == 3) << "never printed";
}

}  // namespace
}  // namespace tandem
