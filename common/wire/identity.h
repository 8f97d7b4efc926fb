// The identities every request carries (PROTOCOLS §1), as a plain value type, and their
// conversion to and from the wire header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/config/cluster_spec.h"
#include "common/job_id.h"
#include "schemas/envelope.capnp.h"

namespace tandem::wire {

struct Identity {
  JobId job_id;
  uint64_t term = 0;
  uint64_t timeline = 0;
  uint64_t generation = 0;
  Role role = Role::UNKNOWN;
  uint32_t index = 0;
  uint64_t incarnation = 0;

  std::string Who() const;  // "ps:1#3" (role:index#incarnation)
};

// config::RoleName for the roles of a cluster; "tool" and "unknown" for the others.
std::string_view RoleName(Role role);
Role ToWire(config::Role role);
// nullopt for TOOL, UNKNOWN and numbers this build does not know: not a cluster's role.
std::optional<config::Role> FromWire(Role role);

// Stamps `header` with `id`, the build id, `request_id` and the relative budget.
void WriteHeader(Header::Builder header, const Identity& id, uint64_t request_id,
                 uint32_t budget_ms);
Identity ReadIdentity(Header::Reader header);

}  // namespace tandem::wire
