#include "worker/collective/chief_store.h"

#include <thread>

#include "common/wait_log.h"

namespace tandem::collective {

using Clock = std::chrono::steady_clock;

Status ChiefStore::Set(std::string_view key, std::string_view value) {
  return client_->KvSet(std::string(key), value);
}

StatusOr<std::string> ChiefStore::Get(std::string_view key) {
  auto value = client_->KvGet(std::string(key));
  if (!value.ok()) return value.status();
  if (!value->has_value()) return Status::NotFound("rendezvous key '" + std::string(key) + "'");
  return std::move(**value);
}

Status ChiefStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  size_t next = 0;  // keys before it are known to be set; values never disappear
  Status last;
  WaitLog wait("the other workers at the rendezvous (keys kept by the chief)");
  while (next < keys.size()) {
    if (wait.due())
      wait.Tick("key '" + keys[next] + "' not set yet" + (last.ok() ? "" : ": " + last.ToString()));
    auto value = client_->KvGet(keys[next]);
    if (value.ok() && value->has_value()) {
      ++next;
      continue;
    }
    // A chief that is briefly unreachable is waited for like a missing key.
    if (!value.ok()) last = value.status();
    if (Clock::now() >= deadline)
      return Status::DeadlineExceeded("rendezvous key '" + keys[next] + "' not set within " +
                                      std::to_string(timeout.count()) + " ms" +
                                      (last.ok() ? "" : ": " + last.ToString()));
    std::this_thread::sleep_for(poll_every_);
  }
  return Status::Ok();
}

}  // namespace tandem::collective
