#include <string>

#include "common/wire/identity.h"
#include "common/wire_precision.h"
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

Status ReadPushRequest(wire::InMessage& m, PushInput* in,
                       std::vector<std::vector<float>>* decoded) {
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
  decoded->reserve(decoded->size() + req.getTables().size());
  // A half-precision frame is decoded into twice its bytes before the shard validates the
  // push: each frame may back one slice only, and must hold exactly count x dim values, so a
  // hostile push cannot make one frame decode many times.
  std::vector<bool> decoded_frame(m.bulk_count(), false);
  for (auto t : req.getTables()) {
    PushTableView v;
    v.table_id = t.getTableId();
    v.dim = t.getDim();
    TANDEM_RETURN_IF_ERROR(SliceIds(m, t, &v.ids));
    // Only pull replies split a table's values over frames (TableSlice.valuesFrames): the log
    // and the apply take a push's gradients as they arrived, one frame a table.
    if (t.getValuesFrames() > 1)
      return Status::InvalidArgument("table " + std::to_string(v.table_id) + ": gradients over " +
                                     std::to_string(t.getValuesFrames()) +
                                     " frames (a push carries one frame a table)");
    const uint8_t precision = t.getPrecision();
    if (precision == static_cast<uint8_t>(WirePrecision::kFp32)) {
      auto grads = m.BulkAs<float>(t.getValuesFrame());
      if (!grads.ok())
        return grads.status().WithContext("table " + std::to_string(v.table_id) + " gradients");
      v.grads = *grads;
    } else if (precision <= static_cast<uint8_t>(WirePrecision::kFp16)) {
      auto half = m.BulkAs<uint16_t>(t.getValuesFrame());
      if (!half.ok())
        return half.status().WithContext("table " + std::to_string(v.table_id) + " gradients");
      if (half->size() != uint64_t{t.getCount()} * t.getDim())
        return Status::InvalidArgument("table " + std::to_string(v.table_id) + ": " +
                                       std::to_string(half->size()) + " gradient values for " +
                                       std::to_string(t.getCount()) + " ids of dim " +
                                       std::to_string(t.getDim()));
      if (decoded_frame[t.getValuesFrame()])
        return Status::InvalidArgument("table " + std::to_string(v.table_id) +
                                       ": gradient frame shared with another table");
      decoded_frame[t.getValuesFrame()] = true;
      // Decoded now, so that the log, the duplicate check and the apply all see fp32 values
      // that are a function of the wire bytes alone.
      decoded->emplace_back(half->size());
      DecodeHalf(static_cast<WirePrecision>(precision), *half, decoded->back());
      v.grads = decoded->back();
    } else {
      return Status::InvalidArgument("table " + std::to_string(v.table_id) +
                                     ": unknown gradient precision " + std::to_string(precision));
    }
    in->tables.push_back(v);
  }
  return Status::Ok();
}

}  // namespace tandem::ps::internal
