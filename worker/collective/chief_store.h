// ChiefStore: the collectives' rendezvous store served by the chief (DESIGN §5, PROTOCOLS §14),
// so ranks meet only over the chief's own (authenticated) socket.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/chief_client.h"
#include "worker/collective/collective.h"

namespace tandem::collective {

// Safe for concurrent use (ChiefClient is). `client` is not owned and must outlive the store.
class ChiefStore : public RendezvousStore {
 public:
  explicit ChiefStore(ChiefClient* client,
                      std::chrono::milliseconds poll_every = std::chrono::milliseconds(10))
      : client_(client), poll_every_(poll_every) {}

  Status Set(std::string_view key, std::string_view value) override;
  // kNotFound when the key is not set.
  StatusOr<std::string> Get(std::string_view key) override;
  // Polls until every key is set; kDeadlineExceeded naming a missing key after `timeout`.
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  ChiefClient* const client_;
  const std::chrono::milliseconds poll_every_;
};

}  // namespace tandem::collective
