// NcclCollective (see nccl_collective.h). ncclResult_t and cudaError_t stop in this file: each
// NCCL or CUDA result is turned into a Status here.
#include "worker/collective/nccl_collective.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <thread>

#include "common/exit_codes.h"
#include "common/log.h"

namespace tandem::collective {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// Channels (CTAs) of every communicator. Part of the determinism class (PROTOCOLS §5.5): with
// Ring/Simple the split of a buffer over channels, hence the order of additions, depends on it.
constexpr int kChannels = 4;
// Polling of a watched op starts short, since one-node ops often take well under a millisecond,
// and backs off so that a long op costs little CPU.
constexpr microseconds kFirstPoll(5);
constexpr microseconds kMaxPoll(200);

Status CudaStatus(cudaError_t e, const std::string& what) {
  // The error is reported here; clear it so that the caller's next cudaGetLastError() does not
  // report it again (sticky errors stay regardless).
  (void)cudaGetLastError();
  std::string msg = what + ": CUDA " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice) {
    return Status::FailedPrecondition(msg);
  }
  return Status::Internal(msg);
}

Status NcclStatus(ncclResult_t r, ncclComm_t comm, const std::string& what) {
  std::string msg = what + ": NCCL " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') msg += std::string(" (") + last + ")";
  switch (r) {
    case ncclRemoteError:  // a peer failed or went away
    case ncclSystemError:  // a socket or network failure, in practice a peer's
      return Status::Unavailable(msg);
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return Status::InvalidArgument(msg);
    default:
      return Status::Internal(msg);
  }
}

// PROTOCOLS §5.5. NCCL reads its environment once, at its first use in the process, so this
// runs before any NCCL call. setenv races with getenv in other threads: once per process, at
// the first Create(), is the least exposure we can have.
void PinNcclAlgorithm() {
  static std::once_flag once;
  std::call_once(once, [] {
    setenv("NCCL_ALGO", "Ring", /*overwrite=*/0);
    setenv("NCCL_PROTO", "Simple", /*overwrite=*/0);
    const char* algo = std::getenv("NCCL_ALGO");
    const char* proto = std::getenv("NCCL_PROTO");
    if (strcasecmp(algo, "Ring") != 0 || strcasecmp(proto, "Simple") != 0) {
      TLOG_WARN(
          "collective: NCCL_ALGO={} NCCL_PROTO={} set by the environment; PROTOCOLS §5.5 "
          "expects Ring/Simple for reproducible sums",
          algo, proto);
    }
  });
}

// Makes `device` current on the calling thread; *previous is the device to restore, or -1.
Status UseDevice(int device, int* previous) {
  *previous = -1;
  int current = 0;
  cudaError_t e = cudaGetDevice(&current);
  if (e != cudaSuccess) return CudaStatus(e, "cudaGetDevice");
  if (current == device) return Status::Ok();
  e = cudaSetDevice(device);
  if (e != cudaSuccess) return CudaStatus(e, "cudaSetDevice(" + std::to_string(device) + ")");
  *previous = current;
  return Status::Ok();
}

// Restores the calling thread's device at the end of the scope (see UseDevice).
struct RestoreDevice {
  int previous;
  ~RestoreDevice() {
    if (previous >= 0) (void)cudaSetDevice(previous);
  }
};

// A buffer must be memory of the communicator's device: a host pointer would fault in a kernel.
Status CheckDeviceBuffer(const void* data, int device, const std::string& what) {
  if (data == nullptr) return Status::InvalidArgument(what + ": null buffer");
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, data);
  if (e != cudaSuccess) return CudaStatus(e, what + ": cudaPointerGetAttributes");
  const bool ok = attr.type == cudaMemoryTypeManaged ||
                  (attr.type == cudaMemoryTypeDevice && attr.device == device);
  if (!ok) {
    return Status::InvalidArgument(what + ": buffer is not memory of CUDA device " +
                                   std::to_string(device));
  }
  return Status::Ok();
}

Status Enqueued(ncclResult_t r, ncclComm_t comm, const std::string& what) {
  if (r == ncclSuccess || r == ncclInProgress) return Status::Ok();
  return NcclStatus(r, comm, what);
}

// Owns a communicator and ends it with ncclCommAbort: unlike ncclCommDestroy, it never waits
// for peers, and it stops kernels still waiting for them.
class NcclComm {
 public:
  NcclComm() = default;
  ~NcclComm() {
    if (comm_ == nullptr) return;
    ncclResult_t r = ncclCommAbort(comm_);
    if (r != ncclSuccess) TLOG_WARN("collective: ncclCommAbort: {}", ncclGetErrorString(r));
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  ncclComm_t* out() { return &comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

// Owns a stream. Drains it before destroying it: an abort counts as done only once no kernel
// can still write the caller's buffer.
class CudaStream {
 public:
  CudaStream() = default;
  ~CudaStream() {
    if (stream_ == nullptr) return;
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }
  cudaStream_t* out() { return &stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class DeviceFloat {
 public:
  DeviceFloat() = default;
  ~DeviceFloat() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  DeviceFloat(const DeviceFloat&) = delete;
  DeviceFloat& operator=(const DeviceFloat&) = delete;

  float* get() const { return ptr_; }
  float** out() { return &ptr_; }

 private:
  float* ptr_ = nullptr;
};

}  // namespace

namespace internal {

// One communicator and what its ops use. Members are destroyed in reverse order: the
// communicator is aborted first, then its stream drained, then the barrier word freed.
class NcclGeneration {
 public:
  std::string prefix;   // also the communicator's name in NCCL's logs
  DeviceFloat barrier;  // the word a Barrier() all-reduces
  CudaStream stream;    // every op of this communicator runs on it
  NcclComm comm;
};

// An abort running on its own thread.
class AbortJob {
 public:
  ~AbortJob() {
    if (thread.joinable()) thread.join();
  }

  std::unique_ptr<NcclGeneration> gen;  // destroyed (aborted) by `thread`
  bool done = false;                    // guarded by the owning NcclCollective's mu_
  Clock::time_point started;
  std::thread thread;  // last: started once the fields above are set
};

}  // namespace internal

using internal::AbortJob;
using internal::NcclGeneration;

Status NcclOptions::Validate() const {
  if (size < 1 || rank < 0 || rank >= size) {
    return Status::InvalidArgument("collective: rank " + std::to_string(rank) +
                                   " outside a group of " + std::to_string(size));
  }
  if (store == nullptr) return Status::InvalidArgument("collective: no rendezvous store");
  if (prefix.empty()) return Status::InvalidArgument("collective: empty store prefix");
  if (device < 0) {
    return Status::InvalidArgument("collective: CUDA device " + std::to_string(device) + " < 0");
  }
  if (timeout_ms <= 0 || abort_grace_ms <= 0) {
    return Status::InvalidArgument("collective: timeout_ms and abort_grace_ms must be > 0");
  }
  if (abort_delay_for_test_ms < 0) {
    return Status::InvalidArgument("collective: abort_delay_for_test_ms must be >= 0");
  }
  return Status::Ok();
}

NcclCollective::NcclCollective(const NcclOptions& options) : options_(options) {}

StatusOr<std::unique_ptr<NcclCollective>> NcclCollective::Create(const NcclOptions& options) {
  TANDEM_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<NcclCollective> c(new NcclCollective(options));
  TANDEM_RETURN_IF_ERROR(c->Rebuild(options.prefix));
  return c;
}

NcclCollective::~NcclCollective() {
  std::unique_ptr<NcclGeneration> current;
  {
    MutexLock l(&mu_);
    current = std::move(current_);
  }
  Retire(std::move(current));
  std::vector<std::unique_ptr<AbortJob>> aborts;
  {
    MutexLock l(&mu_);
    aborts = std::move(aborts_);
  }
  // Destroying the jobs joins their threads, unlocked: they take mu_ when they finish.
}

StatusOr<std::string> NcclCollective::ExchangeId(const std::string& prefix,
                                                 Clock::time_point deadline) {
  const std::string key = prefix + "/nccl-id";
  if (options_.rank == 0) {
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return NcclStatus(r, nullptr, "ncclGetUniqueId");
    std::string bytes(id.internal, sizeof(id.internal));
    TANDEM_RETURN_IF_ERROR(options_.store->Set(key, bytes));
    return bytes;
  }
  const auto left =
      std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
  Status s = options_.store->Wait({key}, left);
  if (s.IsDeadlineExceeded()) {
    return Status::DeadlineExceeded("rank 0 did not publish " + key + " within " +
                                    std::to_string(options_.timeout_ms) + " ms");
  }
  TANDEM_RETURN_IF_ERROR(s);
  TANDEM_ASSIGN_OR_RETURN(std::string bytes, options_.store->Get(key));
  if (bytes.size() != sizeof(ncclUniqueId::internal)) {
    return Status::Internal(key + " holds " + std::to_string(bytes.size()) +
                            " bytes, not an NCCL unique id");
  }
  return bytes;
}

StatusOr<std::unique_ptr<NcclGeneration>> NcclCollective::Connect(const std::string& prefix) {
  const auto deadline = Clock::now() + milliseconds(options_.timeout_ms);
  const std::string what = "NCCL communicator " + prefix + " (rank " +
                           std::to_string(options_.rank) + " of " + std::to_string(options_.size) +
                           ")";
  PinNcclAlgorithm();
  // The id first: a rank that waits for it needs no device yet.
  StatusOr<std::string> id_bytes = ExchangeId(prefix, deadline);
  if (!id_bytes.ok()) return id_bytes.status().WithContext(what);
  ncclUniqueId id;
  std::memcpy(id.internal, id_bytes->data(), sizeof(id.internal));

  int previous = -1;
  TANDEM_RETURN_IF_ERROR(UseDevice(options_.device, &previous).WithContext(what));
  RestoreDevice restore{previous};
  auto gen = std::make_unique<NcclGeneration>();
  gen->prefix = prefix;
  cudaError_t e = cudaStreamCreateWithFlags(gen->stream.out(), cudaStreamNonBlocking);
  if (e != cudaSuccess) return CudaStatus(e, what + ": cudaStreamCreate");
  e = cudaMalloc(gen->barrier.out(), sizeof(float));
  if (e == cudaSuccess)
    e = cudaMemsetAsync(gen->barrier.get(), 0, sizeof(float), gen->stream.get());
  if (e != cudaSuccess) return CudaStatus(e, what + ": barrier word");

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that init and ops return, and a deadline can end them
  config.minCTAs = kChannels;
  config.maxCTAs = kChannels;
  config.commName = gen->prefix.c_str();
  ncclResult_t r =
      ncclCommInitRankConfig(gen->comm.out(), options_.size, id, options_.rank, &config);
  Status s = Enqueued(r, gen->comm.get(), what + ": ncclCommInitRankConfig");
  if (s.ok()) s = Watch(gen.get(), deadline, what + " waiting for all ranks to join", false);
  if (!s.ok()) {
    Retire(std::move(gen));
    return s;
  }
  return gen;
}

Status NcclCollective::Rebuild(const std::string& prefix) {
  if (prefix.empty()) return Status::InvalidArgument("collective: empty store prefix");
  std::unique_ptr<NcclGeneration> old;
  {
    MutexLock l(&mu_);
    old = std::move(current_);
    aborted_ = false;
  }
  Retire(std::move(old));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<NcclGeneration> fresh, Connect(prefix));
  MutexLock l(&mu_);
  current_ = std::move(fresh);
  return Status::Ok();
}

StatusOr<NcclGeneration*> NcclCollective::Usable() {
  {
    MutexLock l(&mu_);
    if (!current_) {
      return Status::FailedPrecondition("collective broken by an earlier failure; Rebuild() it");
    }
    if (!aborted_) return current_.get();
  }
  return Fail(Status::Aborted("collective aborted by Abort(); Rebuild() under a new generation"));
}

Status NcclCollective::Run(const std::string& what,
                           const std::function<Status(NcclGeneration*)>& enqueue) {
  const auto deadline = Clock::now() + milliseconds(options_.timeout_ms);
  TANDEM_ASSIGN_OR_RETURN(NcclGeneration * gen, Usable());
  int previous = -1;
  TANDEM_RETURN_IF_ERROR(UseDevice(options_.device, &previous).WithContext(what));
  RestoreDevice restore{previous};
  Status s = enqueue(gen);
  if (s.ok()) s = Watch(gen, deadline, what, /*stream=*/true);
  if (!s.ok()) return Fail(s);
  return Status::Ok();
}

Status NcclCollective::Watch(NcclGeneration* gen, Clock::time_point deadline,
                             const std::string& what, bool stream) {
  microseconds poll = kFirstPoll;
  while (true) {
    // A non-blocking communicator reports ncclInProgress until it accepted the last call; no
    // other NCCL call may be made before that.
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(gen->comm.get(), &state);
    if (r != ncclSuccess) return NcclStatus(r, gen->comm.get(), what);
    if (state != ncclSuccess && state != ncclInProgress) {
      return NcclStatus(state, gen->comm.get(), what);
    }
    if (state == ncclSuccess) {
      if (!stream) return Status::Ok();
      cudaError_t e = cudaStreamQuery(gen->stream.get());
      if (e == cudaSuccess) return Status::Ok();
      if (e != cudaErrorNotReady) return CudaStatus(e, what);
    }
    MutexLock l(&mu_);
    if (aborted_) return Status::Aborted(what + ": abandoned by Abort()");
    const auto now = Clock::now();
    if (now >= deadline) {
      return Status::DeadlineExceeded(
          what + ": not done within " + std::to_string(options_.timeout_ms) + " ms (" +
          (state == ncclInProgress ? "NCCL still busy" : "still running on the GPU") + ")");
    }
    cv_.WaitUntil(std::min(now + poll, deadline));
    poll = std::min(poll * 2, kMaxPoll);
  }
}

Status NcclCollective::Fail(const Status& status) {
  std::unique_ptr<NcclGeneration> gen;
  {
    MutexLock l(&mu_);
    gen = std::move(current_);
  }
  TLOG_WARN("collective: {}; aborting the NCCL communicator", status.ToString());
  Retire(std::move(gen));
  return status;
}

void NcclCollective::Retire(std::unique_ptr<NcclGeneration> gen) {
  if (!gen) return;
  auto job = std::make_unique<AbortJob>();
  AbortJob* j = job.get();
  j->gen = std::move(gen);
  j->started = Clock::now();
  j->thread = std::thread([this, j] { RunAbort(j); });
  const auto grace_end = j->started + milliseconds(options_.abort_grace_ms);
  bool wedged = false;
  {
    MutexLock l(&mu_);
    aborts_.push_back(std::move(job));
    while (!j->done) {
      if (!cv_.WaitUntil(grace_end)) break;
    }
    if (!j->done) wedged = wedged_ = true;
  }
  if (wedged) {
    TLOG_ERROR(
        "collective: ncclCommAbort has not returned after {} ms (abort_grace_ms); the "
        "process must restart (exit {})",
        options_.abort_grace_ms, static_cast<int>(kExitRestart));
    if (options_.on_wedged) {
      options_.on_wedged();
    } else {
      // The stuck communicator may still write the caller's buffers: exit without running
      // destructors (they would wait for it) and let the supervisor restart us.
      spdlog::default_logger()->flush();
      std::_Exit(kExitRestart);
    }
  }
  ReapAborts();
}

void NcclCollective::RunAbort(AbortJob* job) {
  if (options_.abort_delay_for_test_ms > 0) {
    std::this_thread::sleep_for(milliseconds(options_.abort_delay_for_test_ms));
  }
  // The stream and the barrier word belong to this device; a new thread starts on device 0.
  (void)cudaSetDevice(options_.device);
  job->gen.reset();
  MutexLock l(&mu_);
  job->done = true;
  cv_.SignalAll();
}

void NcclCollective::ReapAborts() {
  std::vector<std::unique_ptr<AbortJob>> finished;
  {
    MutexLock l(&mu_);
    auto running = [](const std::unique_ptr<AbortJob>& j) { return !j->done; };
    auto mid = std::stable_partition(aborts_.begin(), aborts_.end(), running);
    std::move(mid, aborts_.end(), std::back_inserter(finished));
    aborts_.erase(mid, aborts_.end());
  }
  // `finished` joins their threads here, unlocked.
}

Status NcclCollective::AllReduceSum(float* data, size_t count) {
  if (count == 0) return Status::Ok();
  const std::string what = "allreduce of " + std::to_string(count) + " floats";
  TANDEM_RETURN_IF_ERROR(CheckDeviceBuffer(data, options_.device, what));
  return Run(what, [&](NcclGeneration* gen) {
    return Enqueued(
        ncclAllReduce(data, data, count, ncclFloat32, ncclSum, gen->comm.get(), gen->stream.get()),
        gen->comm.get(), what);
  });
}

Status NcclCollective::Broadcast(float* data, size_t count, int root) {
  if (root < 0 || root >= options_.size) {
    return Status::InvalidArgument("broadcast root " + std::to_string(root) + " out of range");
  }
  if (count == 0) return Status::Ok();
  const std::string what = "broadcast of " + std::to_string(count) + " floats";
  TANDEM_RETURN_IF_ERROR(CheckDeviceBuffer(data, options_.device, what));
  return Run(what, [&](NcclGeneration* gen) {
    return Enqueued(
        ncclBroadcast(data, data, count, ncclFloat32, root, gen->comm.get(), gen->stream.get()),
        gen->comm.get(), what);
  });
}

Status NcclCollective::Barrier() {
  return Run("barrier", [](NcclGeneration* gen) {
    return Enqueued(ncclAllReduce(gen->barrier.get(), gen->barrier.get(), 1, ncclFloat32, ncclSum,
                                  gen->comm.get(), gen->stream.get()),
                    gen->comm.get(), "barrier");
  });
}

void NcclCollective::Abort() {
  MutexLock l(&mu_);
  aborted_ = true;
  cv_.SignalAll();
}

bool NcclCollective::Wedged() const {
  MutexLock l(&mu_);
  return wedged_;
}

}  // namespace tandem::collective
