// NcclCollective: the Collective over NCCL on one GPU per rank, with deadlines, abort and
// rebuild under a new generation's store prefix (PROTOCOLS §11). Built only with the CUDA part
// (TANDEM_HAVE_CUDA); this header names no CUDA or NCCL type.
//
// NCCL ops inside a node never return by themselves when a peer dies or stops, so the
// communicator is non-blocking and every op is watched: the calling thread enqueues the op on
// the collective's own stream, then polls the stream and ncclCommGetAsyncError until the op is
// done, the deadline passes, NCCL reports an error or Abort() is called. In the last three cases
// the communicator is ended with ncclCommAbort, which runs on a helper thread: if it has not
// returned abort_grace_ms later, Wedged() becomes true and on_wedged runs (by default the
// process exits 76, kExitRestart, to be restarted). Rebuild() then creates a fresh communicator.
//
// Reproducible sums (PROTOCOLS §5.5): the first Create() of the process sets NCCL_ALGO=Ring and
// NCCL_PROTO=Simple unless the environment already sets them, and every communicator uses a
// fixed channel count.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/sync.h"
#include "worker/collective/collective.h"

namespace tandem::collective {

struct NcclOptions {
  // Behavior.
  int rank = 0;  // this process's rank in [0, size)
  int size = 1;  // number of ranks, one GPU each (NCCL refuses two ranks on one device)
  // Rendezvous store; not owned, must outlive the NcclCollective. Rank 0 publishes the NCCL
  // unique id under "<prefix>/nccl-id"; the others wait for it.
  RendezvousStore* store = nullptr;
  // Key prefix of this generation in the store; a rebuild must use a new one (keys persist).
  std::string prefix = "gen-0";
  // CUDA device ordinal of this rank's GPU. Ops switch the calling thread to it and back.
  int device = 0;
  // Deadline of each op and of the rendezvous, in ms (collective.timeout_ms, default 10 s).
  int64_t timeout_ms = 10000;
  // How long ncclCommAbort may take before Wedged() says so and on_wedged runs, in ms
  // (collective.abort_grace_ms, default 30 s).
  int64_t abort_grace_ms = 30000;
  // Called once per abort that overran abort_grace_ms, on the thread that waited for it.
  // Empty: log and std::_Exit(kExitRestart), because a communicator that cannot be aborted may
  // still write into the caller's buffers and holds the GPU.
  std::function<void()> on_wedged;

  // Testing only: every abort first sleeps this long, in ms, to exercise the wedged path.
  int64_t abort_delay_for_test_ms = 0;

  Status Validate() const;
};

namespace internal {
class NcclGeneration;
class AbortJob;
}  // namespace internal

// `data` of every op is device memory on options.device (device_memory() is true), and the
// caller's writes to it are complete before the call (e.g. its stream was synchronized). An op
// that returns OK has completed: the result may be read from any stream.
//
// Errors as Collective documents, plus kInternal for a failing CUDA runtime and
// kFailedPrecondition when the device is unusable. One difference: NCCL reduces in place, so
// once an op was launched, a failure (kDeadlineExceeded, kAborted while the op ran,
// kUnavailable, kInternal) leaves data[0..count) unspecified, possibly partly reduced. No op
// writes it after the call returned, unless Wedged(). Errors found before the launch
// (kInvalidArgument, kFailedPrecondition, kAborted from an earlier Abort()) leave it unchanged.
// The trainer resynchronises dense state after any failed collective anyway (PROTOCOLS §11).
//
// Thread safety: AllReduceSum, Broadcast, Barrier and Rebuild require external synchronization
// (one caller at a time); Abort(), Wedged(), rank() and size() are safe from any thread.
class NcclCollective : public Collective {
 public:
  // Meets the other ranks through options.store under options.prefix and creates the
  // communicator. kInvalidArgument (before any CUDA call) if options.Validate() fails;
  // kDeadlineExceeded if the ranks do not all arrive within timeout_ms.
  static StatusOr<std::unique_ptr<NcclCollective>> Create(const NcclOptions& options);

  // Aborts the communicator (ncclCommDestroy could wait for peers) and waits for every abort
  // to return; a wedged one has already run on_wedged.
  ~NcclCollective() override;
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  Status AllReduceSum(float* data, size_t count) override;
  Status Broadcast(float* data, size_t count, int root) override;
  Status Barrier() override;
  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  bool device_memory() const override { return true; }

  // Ends the op in flight, which aborts the communicator and returns kAborted; with no op in
  // flight, the next op does so. Later ops return kFailedPrecondition until Rebuild(). Used on a
  // new generation from the chief. Safe from any thread; returns at once.
  void Abort() override;

  // Aborts the current communicator, if any, and creates a fresh one under `prefix`, which
  // must be new to the store; clears an earlier Abort(). The other ranks, possibly replacement
  // processes, call it with the same prefix.
  Status Rebuild(const std::string& prefix) override;

  // True once an abort has not returned abort_grace_ms after it started: the process should
  // exit with kExitRestart (76). Stays true. Safe from any thread.
  bool Wedged() const override;

 private:
  explicit NcclCollective(const NcclOptions& options);

  // The current communicator if ops may run on it; kFailedPrecondition if there is none (an
  // earlier failure), kAborted (and the communicator aborted) after Abort().
  StatusOr<internal::NcclGeneration*> Usable();
  // Enqueues an op on the current communicator and watches it to the end.
  // `enqueue` returns OK when NCCL accepted the op (ncclSuccess or ncclInProgress).
  Status Run(const std::string& what,
             const std::function<Status(internal::NcclGeneration*)>& enqueue);
  // Polls until NCCL (and, if `stream`, the stream) is done, an error, the deadline or Abort().
  Status Watch(internal::NcclGeneration* gen, std::chrono::steady_clock::time_point deadline,
               const std::string& what, bool stream);
  // Aborts the current communicator and returns `status`.
  Status Fail(const Status& status);
  StatusOr<std::unique_ptr<internal::NcclGeneration>> Connect(const std::string& prefix);
  StatusOr<std::string> ExchangeId(const std::string& prefix,
                                   std::chrono::steady_clock::time_point deadline);
  // Aborts `gen` on a helper thread and waits up to abort_grace_ms for it.
  void Retire(std::unique_ptr<internal::NcclGeneration> gen);
  void RunAbort(internal::AbortJob* job);
  // Joins the helper threads whose abort returned.
  void ReapAborts();

  const NcclOptions options_;
  mutable Mutex mu_;
  // Signalled by Abort() (wakes a watched op) and by a finished abort.
  CondVar cv_{&mu_};
  // Null after a failure, until Rebuild().
  std::unique_ptr<internal::NcclGeneration> current_ GUARDED_BY(mu_);
  // Aborts in progress, or finished and not yet joined.
  std::vector<std::unique_ptr<internal::AbortJob>> aborts_ GUARDED_BY(mu_);
  bool aborted_ GUARDED_BY(mu_) = false;  // Abort() since the last Rebuild()
  bool wedged_ GUARDED_BY(mu_) = false;
};

}  // namespace tandem::collective
