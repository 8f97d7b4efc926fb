// Collective operations between the worker replicas (PROTOCOLS §11): the interface the trainer
// uses for dense-gradient all-reduce, state broadcast and barriers, and the rendezvous store the
// replicas meet through. Implementations: GlooCollective (CPU, TCP); NcclCollective later.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::collective {

// One member of a fixed group of `size()` ranks. Every call is collective: all ranks make the
// same calls, in the same order, with the same counts.
//
// Errors (every call returns within the implementation's deadline, never hangs):
//   kDeadlineExceeded   the deadline passed (e.g. a stopped peer);
//   kAborted            the op was abandoned (Abort(), a new generation); rebuild higher up;
//   kUnavailable        a peer died (connection reset);
//   kFailedPrecondition the group is broken by an earlier failure and must be rebuilt;
//   kInvalidArgument    bad arguments (e.g. root out of range).
// On any error the contents of `data` are unchanged.
//
// Thread safety: calls require external synchronization (one op at a time); implementations
// may document methods that are safe from any thread (e.g. an abort).
class Collective {
 public:
  virtual ~Collective() = default;

  // Replaces data[0..count) on every rank with the elementwise sum over ranks. The result is a
  // pure function of the inputs (fixed reduction order) and identical on every rank.
  virtual Status AllReduceSum(float* data, size_t count) = 0;

  // Copies data[0..count) of rank `root` to every rank.
  virtual Status Broadcast(float* data, size_t count, int root) = 0;

  // Returns once every rank has entered the barrier.
  virtual Status Barrier() = 0;

  // Abandons the op in flight and fails later ops until Rebuild (a new generation from the
  // chief, PROTOCOLS §11). Safe from any thread.
  virtual void Abort() = 0;
  // Connects a fresh group of the same ranks (replacement processes among them) under
  // `prefix`, which must be new to the rendezvous store.
  virtual Status Rebuild(const std::string& prefix) = 0;
  // An abandoned or aborted op has not returned within the abort grace: the process should
  // exit 76 (kExitRestart) to be restarted. Safe from any thread.
  virtual bool Wedged() const { return false; }

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether `data` must be device memory (NCCL: GPU buffers) rather than host memory (Gloo).
  virtual bool device_memory() const { return false; }
};

// A key/value store for rendezvous: ranks publish their addresses and wait for each other's.
// Keys are strings, values are bytes (held in std::string). Keys are never overwritten by the
// protocols that use it, so implementations need not order concurrent Sets of one key.
// Thread safety: implementations are safe for concurrent use.
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;

  // Publishes `value` under `key`; readers see either nothing or the whole value.
  virtual Status Set(std::string_view key, std::string_view value) = 0;

  // Returns the value of `key`; kNotFound if it is not set (Get never waits).
  virtual StatusOr<std::string> Get(std::string_view key) = 0;

  // Returns once every key is set; kDeadlineExceeded after `timeout`.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

// A RendezvousStore on a directory shared by the processes (tests, single host). One file per
// key, written to a temporary name and renamed, so a reader never sees a partial value.
// Safe for concurrent use, also across processes.
class FileStore : public RendezvousStore {
 public:
  // Creates `dir` (and parents) if needed.
  static StatusOr<std::unique_ptr<FileStore>> Open(const std::string& dir);

  Status Set(std::string_view key, std::string_view value) override;
  StatusOr<std::string> Get(std::string_view key) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  // Keys may contain '/' and other bytes, so file names hex-encode them.
  std::string PathOf(std::string_view key) const;

  const std::string dir_;
};

}  // namespace tandem::collective
