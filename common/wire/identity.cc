#include "common/wire/identity.h"

#include "common/build_info.h"

namespace tandem::wire {

std::string_view RoleName(Role role) {
  if (auto r = FromWire(role)) return config::RoleName(*r);
  return role == Role::TOOL ? "tool" : "unknown";
}

Role ToWire(config::Role role) {
  switch (role) {
    case config::Role::kChief:
      return Role::CHIEF;
    case config::Role::kPs:
      return Role::PS;
    case config::Role::kWorker:
      return Role::WORKER;
  }
  return Role::UNKNOWN;
}

std::optional<config::Role> FromWire(Role role) {
  switch (role) {
    case Role::CHIEF:
      return config::Role::kChief;
    case Role::PS:
      return config::Role::kPs;
    case Role::WORKER:
      return config::Role::kWorker;
    case Role::UNKNOWN:
    case Role::TOOL:
      break;
  }
  return std::nullopt;
}

std::string Identity::Who() const {
  return std::string(RoleName(role)) + ":" + std::to_string(index) + "#" +
         std::to_string(incarnation);
}

void WriteHeader(Header::Builder h, const Identity& id, uint64_t request_id, uint32_t budget_ms) {
  h.setJobIdHi(id.job_id.hi);
  h.setJobIdLo(id.job_id.lo);
  h.setTerm(id.term);
  h.setTimeline(id.timeline);
  h.setGeneration(id.generation);
  h.setSenderRole(id.role);
  h.setSenderIndex(id.index);
  h.setIncarnation(id.incarnation);
  auto build = BuildId();
  h.setBuildId(capnp::Text::Reader(build.data(), build.size()));
  h.setRequestId(request_id);
  h.setBudgetMs(budget_ms);
}

Identity ReadIdentity(Header::Reader h) {
  Identity id;
  id.job_id = {h.getJobIdHi(), h.getJobIdLo()};
  id.term = h.getTerm();
  id.timeline = h.getTimeline();
  id.generation = h.getGeneration();
  id.role = h.getSenderRole();
  id.index = h.getSenderIndex();
  id.incarnation = h.getIncarnation();
  return id;
}

}  // namespace tandem::wire
