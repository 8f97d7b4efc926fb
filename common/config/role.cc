// Apart from cluster_spec.cc: the wire code (and the message fuzzer, which links it alone) needs
// the role names without the job config behind the task resolution.
#include "common/config/cluster_spec.h"

namespace tandem::config {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kChief:
      return "chief";
    case Role::kPs:
      return "ps";
    case Role::kWorker:
      return "worker";
  }
  return "unknown";
}

std::optional<Role> ParseRole(std::string_view name) {
  for (Role role : {Role::kChief, Role::kPs, Role::kWorker})
    if (RoleName(role) == name) return role;
  return std::nullopt;
}

}  // namespace tandem::config
