#include "worker/output_space.h"

#include <thread>

#include "common/chief_client.h"
#include "common/log.h"

namespace tandem::worker {

using Clock = std::chrono::steady_clock;

std::string OutputSpace::Held() const {
  std::string held = o_.metrics ? o_.metrics->Held() : "";
  const std::string events = o_.tensorboard ? o_.tensorboard->Held() : "";
  if (!events.empty()) held += (held.empty() ? "" : "; ") + events;
  return held;
}

void OutputSpace::Say(const std::string& why) {
  if (why == shown_) return;
  shown_ = why;
  if (o_.waiting_on) o_.waiting_on(why);
}

void OutputSpace::Report() {
  const std::string held = Held();
  const std::string why = held.empty() ? "" : held + std::string(kWaitingGoesOn);
  if (why == shown_) return;
  if (!held.empty()) {
    TLOG_ERROR("outputs: {}", why);
  } else {
    const uint64_t dropped = o_.metrics ? o_.metrics->dropped_lines() : 0;
    TLOG_INFO("outputs: every held line and event is written{}",
              dropped > 0 ? " (" + std::to_string(dropped) +
                                " metrics lines were dropped: the memory for held lines was full)"
                          : std::string());
  }
  Say(why);
}

Status OutputSpace::WhenThereIsSpace(const std::string& what,
                                     const std::function<Status()>& write) {
  Status written = write();
  if (!written.IsResourceExhausted()) {
    if (written.ok()) Report();  // it may have written what was held
    return written;
  }
  TLOG_ERROR("waiting for space for {}: {}", what, written.ToString());
  auto last_said = Clock::now();
  while (written.IsResourceExhausted()) {
    Say("waiting for space for " + what + ": " + written.ToString());
    for (auto until = Clock::now() + o_.retry_every; Clock::now() < until;) {
      if (o_.stopped && o_.stopped())
        return Status::Cancelled(
            what + " was waiting for space when the job was stopped: " + written.ToString());
      std::this_thread::sleep_for(
          std::min<Clock::duration>(std::chrono::milliseconds(100), until - Clock::now()));
    }
    written = write();
    if (written.IsResourceExhausted() && Clock::now() - last_said > std::chrono::seconds(30)) {
      TLOG_WARN("still waiting for space for {}: {}", what, written.ToString());
      last_said = Clock::now();
    }
  }
  if (written.ok()) TLOG_INFO("there is space again: {} written", what);
  Say("");
  Report();
  return written;
}

Status OutputSpace::WriteHeld() {
  if (o_.metrics) TANDEM_RETURN_IF_ERROR(o_.metrics->WriteHeld());
  if (o_.tensorboard) TANDEM_RETURN_IF_ERROR(o_.tensorboard->WriteHeld());
  return Status::Ok();
}

}  // namespace tandem::worker
