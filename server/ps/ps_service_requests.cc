#include <string>

#include "common/wire/identity.h"
#include "server/ps/ps_service_internal.h"
#include "server/ps/shard_validation.h"

namespace tandem::ps::internal {

Status SliceIds(wire::InMessage& m, wire::TableSlice::Reader t, std::span<const uint64_t>* ids) {
  auto frame = m.BulkAs<uint64_t>(t.getIdsFrame());
  if (!frame.ok())
    return frame.status().WithContext("table " + std::to_string(t.getTableId()) + " ids");
  if (frame->size() != t.getCount())
    return Status::InvalidArgument("table " + std::to_string(t.getTableId()) + ": count " +
                                   std::to_string(t.getCount()) + " but " +
                                   std::to_string(frame->size()) + " ids");
  *ids = *frame;
  return Status::Ok();
}

Status ReadPullSlice(wire::InMessage& m, wire::TableSlice::Reader t, const ShardOptions& options,
                     std::span<const uint64_t>* ids) {
  TANDEM_RETURN_IF_ERROR(SliceIds(m, t, ids));
  TANDEM_RETURN_IF_ERROR(ValidatePullIds(options, t.getTableId(), *ids));
  if (t.getDim() != 0 && t.getDim() != options.tables[t.getTableId()].dim)
    return Status::InvalidArgument("table " + std::to_string(t.getTableId()) + ": wrong dim");
  return Status::Ok();
}

Status ReadPushRequest(wire::InMessage& m, PushInput* in) {
  auto req = m.envelope().getBody().getPushRequest();
  in->timeline = m.header().getTimeline();
  in->step = req.getStep();
  in->rank = req.getRank();
  in->incarnation = m.header().getIncarnation();
  in->skip = req.getSkip();
  in->checkpoint = req.getCheckpoint();
  if (m.header().getSenderRole() != wire::Role::WORKER || m.header().getSenderIndex() != in->rank)
    return Status::InvalidArgument("push rank " + std::to_string(in->rank) + " from " +
                                   wire::ReadIdentity(m.header()).Who());
  if (req.getParts() != 1) return Status::Unimplemented("multi-part pushes");
  for (auto t : req.getTables()) {
    PushTableView v;
    v.table_id = t.getTableId();
    v.dim = t.getDim();
    TANDEM_RETURN_IF_ERROR(SliceIds(m, t, &v.ids));
    auto grads = m.BulkAs<float>(t.getValuesFrame());
    if (!grads.ok())
      return grads.status().WithContext("table " + std::to_string(v.table_id) + " gradients");
    v.grads = *grads;
    in->tables.push_back(v);
  }
  return Status::Ok();
}

}  // namespace tandem::ps::internal
