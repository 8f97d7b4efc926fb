// GlooCollective (see gloo_collective.h). Gloo's exceptions stop in this file: every call into
// Gloo runs inside GuardGloo(), which turns them into Status.
#include "worker/collective/gloo_collective.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

namespace tandem::collective {
namespace {

using Clock = std::chrono::steady_clock;

bool MentionsTimeout(const std::string& what) {
  std::string lower(what);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("timeout") != std::string::npos || lower.find("timed out") != std::string::npos;
}

// Runs `fn`, translating Gloo's exceptions. Gloo reports its own timeouts and peer failures
// with the same IoException type, so the message tells them apart.
Status GuardGloo(std::string_view what, const std::function<void()>& fn) {
  try {
    fn();
    return Status::Ok();
  } catch (const gloo::IoException& e) {
    if (MentionsTimeout(e.what()))
      return Status::DeadlineExceeded(std::string(what) + ": " + e.what());
    return Status::Unavailable(std::string(what) + ": peer failed: " + e.what());
  } catch (const gloo::Exception& e) {
    return Status::Internal(std::string(what) + ": " + e.what());
  } catch (const gloo::EnforceNotMet& e) {
    return Status::Internal(std::string(what) + ": " + e.what());
  } catch (const std::exception& e) {
    return Status::Internal(std::string(what) + ": " + e.what());
  }
}

// Lets Gloo rendezvous through our RendezvousStore. Gloo expects failures as exceptions; they
// are caught again by GuardGloo around connectFullMesh.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(RendezvousStore* store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_->Set(Key(key), std::string_view(data.data(), data.size())));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    StatusOr<std::string> value = store_->Get(Key(key));
    Check(value.status());
    return std::vector<char>(value->begin(), value->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(Key(k));
    Check(store_->Wait(full, timeout));
  }

 private:
  std::string Key(const std::string& key) const { return prefix_ + "/" + key; }
  static void Check(const Status& s) {
    // A store timeout must read as a timeout ("Wait timeout") after translation.
    if (s.IsDeadlineExceeded()) throw gloo::IoException("store Wait timeout: " + s.ToString());
    if (!s.ok()) throw gloo::IoException("store: " + s.ToString());
  }

  RendezvousStore* const store_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

// Runs closures one at a time on its own thread. A waiter gives up on the deadline or on
// Cancel(); the closure then runs on, and the destructor waits for it.
class OpRunner {
 public:
  OpRunner() : thread_([this] { Loop(); }) {}
  ~OpRunner() {
    {
      MutexLock l(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    thread_.join();
  }
  OpRunner(const OpRunner&) = delete;
  OpRunner& operator=(const OpRunner&) = delete;

  // REQUIRES: !Busy().
  void Start(std::function<Status()> op) {
    MutexLock l(&mu_);
    op_ = std::move(op);
    busy_ = true;
    cv_.SignalAll();
  }

  // The op's status; kDeadlineExceeded on the deadline; kAborted after Cancel().
  Status Await(Clock::time_point deadline) {
    MutexLock l(&mu_);
    while (busy_ && !cancelled_) {
      if (!cv_.WaitUntil(deadline) && Clock::now() >= deadline) {
        if (!busy_) break;
        return Status::DeadlineExceeded("collective op did not complete within the deadline");
      }
    }
    if (busy_) return Status::Aborted("collective op abandoned by Abort()");
    return result_;
  }

  // Sticky: a runner serves one context, which is never used again after an abort.
  void Cancel() {
    MutexLock l(&mu_);
    cancelled_ = true;
    cv_.SignalAll();
  }

  bool Busy() const {
    MutexLock l(&mu_);
    return busy_;
  }

 private:
  void Loop() {
    // Gloo writes to sockets without MSG_NOSIGNAL; a dead peer must give EPIPE, not kill us.
    // Gloo's device loop thread is created from this one and inherits the mask.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    MutexLock l(&mu_);
    while (true) {
      while (!stop_ && !op_) cv_.Wait();
      if (!op_) return;
      std::function<Status()> op = std::move(op_);
      op_ = nullptr;
      mu_.Unlock();
      Status result = op();
      mu_.Lock();
      result_ = result;
      busy_ = false;
      cv_.SignalAll();
    }
  }

  mutable Mutex mu_;
  CondVar cv_{&mu_};
  std::function<Status()> op_ GUARDED_BY(mu_);
  Status result_ GUARDED_BY(mu_);
  bool busy_ GUARDED_BY(mu_) = false;
  bool cancelled_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // last member: started after the others exist
};

}  // namespace

namespace internal {

// One Gloo context and everything bound to it. Gloo objects are created and used only on the
// runner's thread; the owner's thread touches the staging buffers only while no op runs.
class Generation {
 public:
  template <typename Options>
  struct Bucket {
    std::vector<float> staging;        // private copy: an abandoned op may still write it
    std::unique_ptr<Options> options;  // cached: registering buffers costs ~2 ms per call
  };

  ~Generation() { runner.reset(); }  // join first: the op thread uses everything below

  template <typename Options>
  static Bucket<Options>& BucketFor(std::map<size_t, std::unique_ptr<Bucket<Options>>>* buckets,
                                    size_t count) {
    auto& slot = (*buckets)[count];
    if (!slot) {
      slot = std::make_unique<Bucket<Options>>();
      slot->staging.resize(count);
    }
    return *slot;
  }

  // Gloo matches messages by tag; ranks run the same op sequence, so a counter agrees.
  uint32_t NextTag() { return next_tag_++; }

  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::map<size_t, std::unique_ptr<Bucket<gloo::AllreduceOptions>>> allreduce;
  std::map<size_t, std::unique_ptr<Bucket<gloo::BroadcastOptions>>> broadcast;
  std::unique_ptr<gloo::BarrierOptions> barrier;
  Clock::time_point abandoned_at;
  std::unique_ptr<OpRunner> runner = std::make_unique<OpRunner>();

 private:
  uint32_t next_tag_ = 0;
};

}  // namespace internal

using internal::Generation;

namespace {

Status RunAllreduce(Generation* gen, Generation::Bucket<gloo::AllreduceOptions>* b,
                    std::chrono::milliseconds timeout) {
  return GuardGloo("allreduce", [&] {
    if (!b->options) {
      b->options = std::make_unique<gloo::AllreduceOptions>(gen->context);
      b->options->setOutput(b->staging.data(), b->staging.size());
      // RING: reduce-scatter then all-gather, so the order of additions is fixed by the rank
      // layout and every rank gets the same bits (PROTOCOLS §5.5).
      b->options->setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      b->options->setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      b->options->setTimeout(timeout);
    }
    b->options->setTag(gen->NextTag());
    gloo::allreduce(*b->options);
  });
}

Status RunBroadcast(Generation* gen, Generation::Bucket<gloo::BroadcastOptions>* b, int root,
                    std::chrono::milliseconds timeout) {
  return GuardGloo("broadcast", [&] {
    if (!b->options) {
      b->options = std::make_unique<gloo::BroadcastOptions>(gen->context);
      b->options->setOutput(b->staging.data(), b->staging.size());
      b->options->setTimeout(timeout);
    }
    b->options->setRoot(root);
    b->options->setTag(gen->NextTag());
    gloo::broadcast(*b->options);
  });
}

Status RunBarrier(Generation* gen, std::chrono::milliseconds timeout) {
  return GuardGloo("barrier", [&] {
    if (!gen->barrier) {
      gen->barrier = std::make_unique<gloo::BarrierOptions>(gen->context);
      gen->barrier->setTimeout(timeout);
    }
    gen->barrier->setTag(gen->NextTag());
    gloo::barrier(*gen->barrier);
  });
}

}  // namespace

Status GlooOptions::Validate() const {
  if (size < 1 || rank < 0 || rank >= size) {
    return Status::InvalidArgument("collective: rank " + std::to_string(rank) +
                                   " outside a group of " + std::to_string(size));
  }
  if (store == nullptr) return Status::InvalidArgument("collective: no rendezvous store");
  if (prefix.empty()) return Status::InvalidArgument("collective: empty store prefix");
  if (iface.empty() && hostname.empty()) {
    return Status::InvalidArgument("collective: neither iface nor hostname set");
  }
  if (timeout_ms <= 0 || abort_grace_ms <= 0) {
    return Status::InvalidArgument("collective: timeout_ms and abort_grace_ms must be > 0");
  }
  return Status::Ok();
}

GlooCollective::GlooCollective(const GlooOptions& options) : options_(options) {}

StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Create(const GlooOptions& options) {
  TANDEM_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<GlooCollective> c(new GlooCollective(options));
  TANDEM_RETURN_IF_ERROR(c->Rebuild(options.prefix));
  return c;
}

GlooCollective::~GlooCollective() {
  std::unique_ptr<Generation> current;
  std::vector<std::unique_ptr<Generation>> retired;
  {
    MutexLock l(&mu_);
    current = std::move(current_);
    retired = std::move(retired_);
  }
  // Destroying a generation joins its thread: bounded by Gloo's own timeout.
}

Status GlooCollective::Connect(Generation* gen, const std::string& prefix) {
  const std::chrono::milliseconds timeout(options_.timeout_ms);
  return GuardGloo("connect", [&] {
    gloo::transport::tcp::attr attr;
    if (!options_.iface.empty()) {
      attr.iface = options_.iface;
    } else {
      attr.hostname = options_.hostname;
    }
    gen->device = gloo::transport::tcp::CreateDevice(attr);
    gen->context = std::make_shared<gloo::rendezvous::Context>(options_.rank, options_.size);
    // The same deadline bounds Gloo's own waits, so an abandoned op does return.
    gen->context->setTimeout(timeout);
    StoreAdapter store(options_.store, prefix, timeout);
    gen->context->connectFullMesh(store, gen->device);
  });
}

Status GlooCollective::Rebuild(const std::string& prefix) {
  if (prefix.empty()) return Status::InvalidArgument("collective: empty store prefix");
  auto fresh = std::make_unique<Generation>();
  Generation* gen = fresh.get();
  std::vector<std::unique_ptr<Generation>> finished;
  {
    MutexLock l(&mu_);
    if (current_ && current_->runner->Busy()) current_->abandoned_at = Clock::now();
    if (current_) retired_.push_back(std::move(current_));
    // Keep only retired contexts whose op still runs; the rest are closed below, unlocked.
    auto still_running = [](const std::unique_ptr<Generation>& g) { return g->runner->Busy(); };
    auto mid = std::stable_partition(retired_.begin(), retired_.end(), still_running);
    std::move(mid, retired_.end(), std::back_inserter(finished));
    retired_.erase(mid, retired_.end());
    current_ = std::move(fresh);
    aborted_ = false;
    broken_ = false;
  }
  finished.clear();
  return Run(gen, [this, gen, prefix] { return Connect(gen, prefix); })
      .WithContext("collective rendezvous under " + prefix);
}

StatusOr<Generation*> GlooCollective::Usable() {
  MutexLock l(&mu_);
  if (aborted_) return Status::Aborted("collective aborted; Rebuild() under a new generation");
  if (broken_ || !current_) {
    return Status::FailedPrecondition("collective broken by an earlier failure; Rebuild() it");
  }
  return current_.get();
}

Status GlooCollective::Run(Generation* gen, std::function<Status()> op) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  gen->runner->Start(std::move(op));
  Status s = gen->runner->Await(deadline);
  if (!s.ok()) OnFailure(gen, s);
  return s;
}

void GlooCollective::OnFailure(Generation* gen, const Status& status) {
  MutexLock l(&mu_);
  if (!status.IsAborted()) broken_ = true;
  if (!gen->runner->Busy()) return;  // Gloo returned an error: retired at Rebuild()
  gen->abandoned_at = Clock::now();
  if (current_.get() == gen) retired_.push_back(std::move(current_));
  broken_ = true;
}

Status GlooCollective::AllReduceSum(float* data, size_t count) {
  if (count == 0) return Status::Ok();
  TANDEM_ASSIGN_OR_RETURN(Generation * gen, Usable());
  auto& b = Generation::BucketFor(&gen->allreduce, count);
  std::memcpy(b.staging.data(), data, count * sizeof(float));
  const std::chrono::milliseconds timeout(options_.timeout_ms);
  TANDEM_RETURN_IF_ERROR(Run(gen, [gen, &b, timeout] { return RunAllreduce(gen, &b, timeout); }));
  std::memcpy(data, b.staging.data(), count * sizeof(float));
  return Status::Ok();
}

Status GlooCollective::Broadcast(float* data, size_t count, int root) {
  if (root < 0 || root >= options_.size) {
    return Status::InvalidArgument("broadcast root " + std::to_string(root) + " out of range");
  }
  if (count == 0) return Status::Ok();
  TANDEM_ASSIGN_OR_RETURN(Generation * gen, Usable());
  auto& b = Generation::BucketFor(&gen->broadcast, count);
  std::memcpy(b.staging.data(), data, count * sizeof(float));
  const std::chrono::milliseconds timeout(options_.timeout_ms);
  TANDEM_RETURN_IF_ERROR(
      Run(gen, [gen, &b, root, timeout] { return RunBroadcast(gen, &b, root, timeout); }));
  std::memcpy(data, b.staging.data(), count * sizeof(float));
  return Status::Ok();
}

Status GlooCollective::Barrier() {
  TANDEM_ASSIGN_OR_RETURN(Generation * gen, Usable());
  const std::chrono::milliseconds timeout(options_.timeout_ms);
  return Run(gen, [gen, timeout] { return RunBarrier(gen, timeout); });
}

void GlooCollective::Abort() {
  MutexLock l(&mu_);
  aborted_ = true;
  if (current_) current_->runner->Cancel();
}

bool GlooCollective::Wedged() const {
  MutexLock l(&mu_);
  const auto now = Clock::now();
  const std::chrono::milliseconds grace(options_.abort_grace_ms);
  for (const auto& g : retired_) {
    if (g->runner->Busy() && now - g->abandoned_at > grace) return true;
  }
  return false;
}

}  // namespace tandem::collective
