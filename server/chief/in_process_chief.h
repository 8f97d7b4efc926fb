// A chief in the test's own process, on 127.0.0.1, for tests of what talks to it (the worker's
// rendezvous store, its replica group). Test scaffolding only: worker code never includes
// server/.
#pragma once

#include <memory>
#include <string>

#include "common/chief_client.h"
#include "common/config/job_config.h"
#include "common/job_id.h"
#include "common/status.h"
#include "common/wire/rpc_server.h"
#include "server/chief/chief_service.h"

namespace tandem::chief {

class InProcessChief {
 public:
  InProcessChief() = default;
  ~InProcessChief() { Stop(); }
  InProcessChief(const InProcessChief&) = delete;
  InProcessChief& operator=(const InProcessChief&) = delete;

  // Serves `job` (its cluster.chief is not bound: the chief takes a free port) as `job_id`.
  Status Start(const config::JobConfig& job, const JobId& job_id) {
    job_id_ = job_id;
    config_hash_ = job.ComputationHash();
    wire::ServerOptions o;
    o.lanes = ChiefLanes();
    wire::Identity self;
    self.job_id = job_id;
    self.role = wire::Role::CHIEF;
    server_ = std::make_unique<wire::RpcServer>(&context_, o, self);
    auto service = ChiefService::Create(job, server_.get());
    if (!service.ok()) return service.status();
    service_ = std::move(service).value();
    service_->Register();
    if (Status s = server_->Start(); !s.ok()) return s;
    return service_->Start();
  }
  void Stop() {
    if (server_) server_->Stop();
    service_.reset();
    server_.reset();
  }

  // Options for a member's client: `index` of `role`, advertising `address`.
  ChiefClientOptions Client(wire::Role role, uint32_t index, const std::string& address) const {
    ChiefClientOptions c;
    c.chief_endpoint = server_->endpoint();
    c.identity.job_id = job_id_;
    c.identity.role = role;
    c.identity.index = index;
    c.address = address;
    c.config_hash = config_hash_;
    return c;
  }
  zmq::context_t* context() { return &context_; }

 private:
  zmq::context_t context_{2};
  JobId job_id_;
  std::string config_hash_;
  std::unique_ptr<wire::RpcServer> server_;  // before service_: its handlers point into it
  std::unique_ptr<ChiefService> service_;
};

}  // namespace tandem::chief
