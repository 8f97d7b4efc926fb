// The chief's RPC service (DESIGN §5, PROTOCOLS §1, §10, §12): registration and heartbeats
// (Membership), a monitor thread that probes silent members before declaring them lost, named
// barriers, the collectives' rendezvous key/value store, the cluster view and the job's stop.
// Training steps never wait on it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "common/config/job_config.h"
#include "common/status.h"
#include "common/sync.h"
#include "common/time_source.h"
#include "common/wire/diagnostics.h"
#include "common/wire/parking_lot.h"
#include "common/wire/rpc_client.h"
#include "common/wire/rpc_server.h"
#include "server/chief/checkpoint_coordinator.h"
#include "server/chief/chief_state.h"
#include "server/chief/membership.h"

namespace tandem::chief {

std::vector<wire::LaneOptions> ChiefLanes();

// Safe for concurrent use. `server` must outlive the service and be stopped before the service
// is destroyed (its handlers call into the service).
class ChiefService {
 public:
  // Opens `job.checkpoint.dir/chief/state`, raises and persists the term, and stamps the term,
  // generation and timeline into `server`'s identity. kDataLoss naming the file for a corrupt
  // state; kUnavailable when the state cannot be written.
  // `new_run`: the caller started every process of the job afresh (`tandem local`, also after a
  // rollback), so a run left open by a killed chief has no survivors: this is a job start.
  // `time` (not owned, outlives the service) is what the membership decisions read: silences,
  // probes, losses, the rejoin grace; the monitor's tick and the waits stay on the real clock.
  static StatusOr<std::unique_ptr<ChiefService>> Create(
      const config::JobConfig& job, wire::RpcServer* server, bool new_run = false,
      const TimeSource* time = TimeSource::Steady());
  ~ChiefService();  // stops the monitor thread
  ChiefService(const ChiefService&) = delete;
  ChiefService& operator=(const ChiefService&) = delete;

  // Registers the handlers and diagnostics. Call before server->Start().
  void Register();
  // Starts the heartbeat monitor. Call after server->Start().
  Status Start();
  // Stops the monitor thread (also done by the destructor).
  void Stop();

  // SIGTERM or a request: the job goes to "stopping" (heartbeat replies carry stop) unless it
  // already ended.
  void RequestStop(const std::string& reason);
  // Blocks until the job state is terminal and every registered member has reported a terminal
  // state and been silent for three heartbeat intervals (or said its last word), or is lost or
  // left, and every tool that watches the job has been answered with its end (for at most three
  // heartbeat intervals more); or until `until`, or until `give_up` (polled every tick, at most
  // 100 ms) says so. Returns the job state then.
  JobState WaitFinished(std::chrono::steady_clock::time_point until,
                        const std::function<bool()>& give_up = nullptr);

  uint64_t term() const;
  JobState job_state() const;
  // Not OK when the chief cannot go on: a job start decided late (see ConfirmRejoin) was refused,
  // e.g. a finished job (kInvalidArgument). The caller exits.
  Status fatal() const;
  // The chief leaves on purpose: the next chief start is a job start, not a rejoin (PROTOCOLS
  // §10). Not called when the chief dies, so that its successor rejoins the run.
  Status CloseRun();
  JobSnapshot Snapshot() const;

 private:
  struct BarrierState {
    int64_t key = 0;  // parking key
    uint32_t count = 0;
    std::set<std::pair<int, uint32_t>> entered;  // (role, index)
    bool complete = false;
  };

  ChiefService(const config::JobConfig& job, wire::RpcServer* server,
               std::unique_ptr<ChiefState> state, const TimeSource* time);
  TimeSource::time_point Now() const { return time_->Now(); }

  void HandleRegister(wire::InMessage& m, wire::Responder r);
  void HandleHeartbeat(wire::InMessage& m, wire::Responder r);
  void HandleStatus(wire::InMessage& m, wire::Responder r);
  void HandleBarrier(wire::InMessage& m, wire::Responder r);
  void HandleKvSet(wire::InMessage& m, wire::Responder r);
  void HandleKvGet(wire::InMessage& m, wire::Responder r);
  void HandleStopJob(wire::InMessage& m, wire::Responder r);
  void HandleCommitCheckpoint(wire::InMessage& m, wire::Responder r);
  void HandleRegroup(wire::InMessage& m, wire::Responder r);
  // Pings `s` at its address; true when it answers as the same incarnation. Without `client`
  // (a handler thread) it uses a socket of its own.
  bool ProbeAnswers(const Suspect& s, wire::RpcClient* client, std::map<std::string, int>* handles,
                    StatusOr<wire::PingResult>* result = nullptr);
  void MonitorLoop();
  void MonitorTick(wire::RpcClient* client, std::map<std::string, int>* handles);
  // A rejoining chief learns from the first registration whether the run has survivors: a member
  // with an incarnation confirms the rejoin; a new process means the whole job was started
  // again, and the chief starts it (CheckpointCoordinator::Open) instead. Returns fatal_.
  Status ConfirmRejoin(const RegisterInput& in) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies the term, generation and timeline into the server's identity, so replies carry them.
  void SyncIdentity() EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const config::JobConfig job_;
  wire::RpcServer* const server_;
  const TimeSource* const time_;
  const std::chrono::milliseconds tick_;
  const std::chrono::milliseconds probe_budget_;
  std::unique_ptr<ChiefState> state_;  // used only through membership_ after construction
  wire::ParkingLot barriers_parked_;
  zmq::context_t probe_context_{1};  // the monitor's own sockets

  mutable Mutex mu_;
  CondVar changed_{&mu_};       // membership changed (WaitFinished looks again)
  CondVar monitor_wake_{&mu_};  // the monitor's tick, cut short by Stop()
  Membership membership_ GUARDED_BY(mu_);
  std::optional<CheckpointCoordinator> checkpoints_ GUARDED_BY(mu_);  // set by Create
  std::map<std::string, BarrierState> barriers_ GUARDED_BY(mu_);
  int64_t next_barrier_key_ GUARDED_BY(mu_) = 0;
  std::map<std::string, std::string> kv_ GUARDED_BY(mu_);
  bool kv_in_memory_only_ GUARDED_BY(mu_) = false;  // its file met a full disk
  // The checkpoint whose commit a full disk refused last (worker 0 asks again every second):
  // logged once, and once more when it is committed.
  int64_t commit_waits_for_space_ GUARDED_BY(mu_) = -1;
  bool stop_monitor_ GUARDED_BY(mu_) = false;
  // Tools watching the job (`tandem local`, `tandem drill` poll the status), by connection: when
  // each last asked, and whether a reply showing the job's end went to it. WaitFinished gives
  // every recent one that reply before leaving.
  struct ToolWatch {
    std::chrono::steady_clock::time_point asked;
    bool saw_end = false;
  };
  std::map<std::string, ToolWatch> tools_ GUARDED_BY(mu_);
  bool rejoin_unconfirmed_ GUARDED_BY(mu_) = false;  // see ConfirmRejoin
  const TimeSource::time_point started_at_;
  Status fatal_ GUARDED_BY(mu_);
  std::thread monitor_;
};

}  // namespace tandem::chief
