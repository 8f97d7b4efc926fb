// GlooCollective: the Collective over Gloo's TCP transport (CPU), with deadlines, abort and
// rebuild under a new generation's store prefix (PROTOCOLS §11).
//
// This Gloo version cannot interrupt an op. So every op runs on a thread owned by the object
// and the caller waits with a deadline; an op that misses its deadline or is aborted is
// abandoned: its thread runs on (into Gloo's own timeout, set to the same deadline) on private
// copies of the buffers, and the context is retired. Rebuild() then connects a fresh context.
// An abandoned op still running `abort_grace_ms` after it was abandoned makes Wedged() true;
// the process should then exit 76 (the library never exits by itself).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/sync.h"
#include "worker/collective/collective.h"

namespace tandem::collective {

struct GlooOptions {
  // Behavior.
  int rank = 0;  // this process's rank in [0, size)
  int size = 1;  // number of ranks
  // Rendezvous store; not owned, must outlive the GlooCollective.
  RendezvousStore* store = nullptr;
  // Key prefix of this generation in the store; a rebuild must use a new one (keys persist).
  std::string prefix = "gen-0";
  // Network: interface name (collective.iface) if set, else the address to bind.
  std::string iface;
  std::string hostname = "127.0.0.1";
  // Deadline of each op and of the rendezvous, in ms (collective.timeout_ms, default 10 s).
  int64_t timeout_ms = 10000;
  // How long an abandoned op may take to return before Wedged() says so, in ms
  // (collective.abort_grace_ms). Gloo's own timeout ends it after about timeout_ms.
  int64_t abort_grace_ms = 20000;

  Status Validate() const;
};

namespace internal {
class Generation;
}  // namespace internal

// Thread safety: AllReduceSum, Broadcast, Barrier and Rebuild require external synchronization
// (one caller at a time); Abort(), Wedged(), rank() and size() are safe from any thread.
class GlooCollective : public Collective {
 public:
  // Connects to the other ranks through options.store under options.prefix.
  // kDeadlineExceeded if they do not all arrive within timeout_ms.
  static StatusOr<std::unique_ptr<GlooCollective>> Create(const GlooOptions& options);

  // Waits for abandoned ops to return (bounded by Gloo's timeout), then closes everything.
  ~GlooCollective() override;
  GlooCollective(const GlooCollective&) = delete;
  GlooCollective& operator=(const GlooCollective&) = delete;

  Status AllReduceSum(float* data, size_t count) override;
  Status Broadcast(float* data, size_t count, int root) override;
  Status Barrier() override;
  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  // Abandons the op in flight, which returns kAborted at once, and makes later ops return
  // kAborted until Rebuild(). Used on a new generation from the chief. Safe from any thread.
  void Abort() override;

  // Retires the current context (abandoning nothing that still runs: such ops keep their
  // buffers) and connects a fresh one under `prefix`, which must be new to the store. The
  // other ranks, possibly replacement processes, call it with the same prefix.
  Status Rebuild(const std::string& prefix) override;

  // True when an abandoned op has not returned abort_grace_ms after it was abandoned: the
  // process should exit with kExitRestart (76). Safe from any thread.
  bool Wedged() const override;

 private:
  explicit GlooCollective(const GlooOptions& options);

  // The current generation if ops may run on it; kAborted or kFailedPrecondition otherwise.
  StatusOr<internal::Generation*> Usable();
  // Runs `op` on gen's thread and waits for it until the deadline or Abort().
  Status Run(internal::Generation* gen, std::function<Status()> op);
  // Records a failed op: the context is broken, and retired if its op still runs.
  void OnFailure(internal::Generation* gen, const Status& status);
  Status Connect(internal::Generation* gen, const std::string& prefix);

  const GlooOptions options_;
  mutable Mutex mu_;
  std::unique_ptr<internal::Generation> current_ GUARDED_BY(mu_);
  // Contexts that failed or were abandoned; kept until their op returns.
  std::vector<std::unique_ptr<internal::Generation>> retired_ GUARDED_BY(mu_);
  bool aborted_ GUARDED_BY(mu_) = false;  // Abort() since the last Rebuild()
  bool broken_ GUARDED_BY(mu_) = false;   // an op failed since the last Rebuild()
};

}  // namespace tandem::collective
