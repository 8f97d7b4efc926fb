#include "worker/roll_forward/replica_resync.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "common/log.h"

// Header-only xxHash, as in slot_map.cc.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tandem::worker {
namespace {

// Integers travel through the float all-reduce as 20-bit halves: each sum has one non-zero
// term, and every value stays exact in fp32.
constexpr double kHalf = 1 << 20;
void PutInt(int64_t v, float* out) {
  out[0] = static_cast<float>(static_cast<double>(v / (1 << 20)));
  out[1] = static_cast<float>(static_cast<double>(v % (1 << 20)));
}
int64_t GetInt(const float* in) {
  return static_cast<int64_t>(static_cast<double>(in[0]) * kHalf + static_cast<double>(in[1]));
}

constexpr int kSlot = 4;  // floats per rank in each exchange

// Any failure of the group during the resync is another loss to recover from.
Status GroupError(const Status& s, const char* what) {
  if (s.ok()) return s;
  return Status::Unavailable(std::string("resync (") + what + "): " + s.ToString());
}

}  // namespace

StatusOr<ResyncResult> ResyncReplicas(collective::Collective* group, Trainer* trainer,
                                      const ResyncInput& in) {
  if (group == nullptr) return Status::InvalidArgument("resync needs an all-reduce group");
  const int m = group->size();
  const int me = group->rank();
  // 1. Who survived, and from which step each can go on: completed + 1 after its pushes of that
  // step were acknowledged, otherwise completed (the lost rank's pushes of it may be missing).
  std::vector<float> x(static_cast<size_t>(kSlot * m), 0.0f);
  if (!in.replacement) {
    const int64_t from = in.pushes_acknowledged ? in.completed + 1 : in.completed;
    x[static_cast<size_t>(kSlot * me)] = 1.0f;
    PutInt(std::max<int64_t>(from, -1) + 1, &x[static_cast<size_t>(kSlot * me + 1)]);
  }
  TANDEM_RETURN_IF_ERROR(GroupError(group->AllReduceSum(x.data(), x.size()), "steps"));
  ResyncResult r;
  r.root = -1;
  int64_t next = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < m; ++i) {
    if (x[static_cast<size_t>(kSlot * i)] < 0.5f) continue;
    ++r.survivors;
    if (r.root < 0) r.root = i;
    next = std::min(next, GetInt(&x[static_cast<size_t>(kSlot * i + 1)]) - 1);
  }
  if (r.survivors == 0)
    return Status::FailedPrecondition(
        "no replica survived: nothing to roll forward from (the job rolls back to its last "
        "checkpoint)");
  // A replica that cannot go on from there (it would have to undo more than its last step)
  // stops the whole group with the same verdict: nothing was changed yet.
  r.next_step = std::max<int64_t>(next, 0);
  Status undo = Status::Ok();
  if (!in.replacement && in.completed >= r.next_step) {
    undo = in.completed == r.next_step
               ? trainer->RollBackLastStep(r.next_step)
               : Status::FailedPrecondition("worker completed step " +
                                            std::to_string(in.completed) + ", the group goes on " +
                                            "from " + std::to_string(r.next_step));
    r.rolled_back = undo.ok();
  }
  // 2. The survivors' dense states, now all of step next_step - 1, are compared by hash: they
  // must agree (PROTOCOLS §11); the broadcast below makes them agree in any case.
  const std::vector<float> state = trainer->ExportDenseState();
  const uint64_t hash = XXH3_64bits(state.data(), state.size() * sizeof(float));
  std::fill(x.begin(), x.end(), 0.0f);
  float* mine = &x[static_cast<size_t>(kSlot * me)];
  mine[0] = undo.ok() ? 0.0f : 1.0f;
  if (!in.replacement)
    for (int k = 0; k < 3; ++k)
      mine[1 + k] = static_cast<float>((hash >> (16 * k)) & 0xffff) + 1.0f;  // 0 = no state
  TANDEM_RETURN_IF_ERROR(GroupError(group->AllReduceSum(x.data(), x.size()), "hashes"));
  for (int i = 0; i < m; ++i) {
    if (x[static_cast<size_t>(kSlot * i)] > 0.5f)
      return Status::FailedPrecondition(
          "worker:" + std::to_string(i) + " cannot undo its last step to go on from step " +
          std::to_string(r.next_step) + (i == me ? ": " + undo.ToString() : std::string()));
  }
  const float* root_hash = &x[static_cast<size_t>(kSlot * r.root + 1)];
  for (int i = 0; i < m; ++i) {
    const float* h = &x[static_cast<size_t>(kSlot * i + 1)];
    if (h[0] == 0.0f) continue;  // the replacement
    if (!std::equal(h, h + 3, root_hash))
      TLOG_WARN("resync: worker:{} held another dense state than worker:{}; it takes worker:{}'s",
                i, r.root, r.root);
  }
  // 3. Every replica takes the root's state (the replacement needs it; the others get theirs).
  std::vector<float> shared = state;
  TANDEM_RETURN_IF_ERROR(
      GroupError(group->Broadcast(shared.data(), shared.size(), r.root), "dense state"));
  TANDEM_RETURN_IF_ERROR(trainer->ImportDenseState(shared).WithContext("resync: dense state"));
  TLOG_INFO(
      "resync: {} of {} replicas survived; every replica goes on from step {} with the "
      "dense state of worker:{}{}",
      r.survivors, m, r.next_step, r.root,
      r.rolled_back ? " (this one undid its step " + std::to_string(r.next_step) + ")" : "");
  return r;
}

}  // namespace tandem::worker
