// TANDEM_CHECK(cond) << "detail": an invariant that, broken, means a bug in this process, not a
// bad input (those are a Status, STYLE §2). It prints where and what failed and aborts, so the
// core dump and the log show the broken invariant instead of undefined behaviour later on.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace tandem::internal {

// Collects the optional "<< detail" and aborts when destroyed, at the end of the full
// expression: the detail is complete by then.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition)
      : file_(file), line_(line), condition_(condition) {}
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;

  [[noreturn]] ~CheckFailure() {
    const std::string detail = stream_.str();
    // stderr, unbuffered, rather than the log: the log's sinks may never flush before abort().
    std::fprintf(stderr, "%s:%d: TANDEM_CHECK(%s) failed%s%s\n", file_, line_, condition_,
                 detail.empty() ? "" : ": ", detail.c_str());
    std::fflush(stderr);
    std::abort();
  }

  std::ostream& stream() { return stream_; }

 private:
  const char* file_;
  int line_;
  const char* condition_;
  std::ostringstream stream_;
};

}  // namespace tandem::internal

// `while`, not `if`: no dangling-else surprises, and the body never loops since it aborts.
// The condition is evaluated once; the streamed detail only when it is false.
#define TANDEM_CHECK(cond) \
  while (!(cond)) ::tandem::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()
