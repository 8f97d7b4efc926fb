// libFuzzer target: arbitrary bytes, cut into frames, go through what the RPC server and client
// run on every message they receive (InMessage::Decode with the server's DecodeLimits), then
// through what a PS shard runs on every pull and push (ps_service_internal.h, shard_validation.h).
// Decode promises that no later field read can throw, so every field of every decoded envelope
// is read here outside any try: a kj::Exception escaping is a finding like a sanitizer report.
//
// Input layout: u8 bulk-frame count n (low 4 bits), then n + 1 u16 LE frame lengths (envelope
// first), then the frames' bytes; lengths are clamped to what is left. Run with
// TANDEM_FUZZ_WRITE_SEEDS=<dir> to write seeds built from valid messages into <dir> and exit.
#include <capnp/dynamic.h>
#include <capnp/schema.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/slot_map.h"
#include "common/wire/identity.h"
#include "common/wire/message.h"
#include "server/ps/ps_service_internal.h"
#include "server/ps/shard_validation.h"

namespace tandem::fuzz {
namespace {

using wire::Envelope;

constexpr size_t kMaxBulkFrames = 15;

std::vector<zmq::message_t> SplitFrames(const uint8_t* data, size_t size) {
  std::vector<zmq::message_t> frames;
  if (size == 0) return frames;
  const size_t n = 1 + (data[0] & 0x0f);
  size_t pos = 1;
  std::vector<size_t> lengths(n, 0);
  for (size_t i = 0; i < n && pos + 2 <= size; ++i, pos += 2)
    lengths[i] = data[pos] | (size_t{data[pos + 1]} << 8);
  for (size_t i = 0; i < n; ++i) {
    const size_t len = std::min(lengths[i], size - std::min(pos, size));
    frames.emplace_back(data + pos, len);  // copies: frames land at zmq's own offsets
    pos += len;
  }
  return frames;
}

// Two shards of three tables, so that ownership, dims and NaN checks all have work to do.
ps::ShardOptions MakeOptions() {
  ps::ShardOptions o;
  o.shard_index = 0;
  o.num_shards = 2;
  o.num_workers = 4;
  o.tables.resize(3);
  o.tables[0].dim = 1;
  o.tables[1].dim = 4;
  o.tables[2].dim = 8;
  o.max_rows_per_push = 4096;
  return o;
}

const ps::ShardOptions& Options() {
  static const ps::ShardOptions options = MakeOptions();
  return options;
}

// Reads every field that is set, as a handler or a log line might (texts included).
void ReadAll(capnp::DynamicValue::Reader v);

void ReadStruct(capnp::DynamicStruct::Reader s) {
  for (auto field : s.getSchema().getFields()) {
    if (s.has(field)) ReadAll(s.get(field));
  }
}

void ReadAll(capnp::DynamicValue::Reader v) {
  switch (v.getType()) {
    case capnp::DynamicValue::TEXT:
      (void)v.as<capnp::Text>().size();
      break;
    case capnp::DynamicValue::DATA:
      (void)v.as<capnp::Data>().size();
      break;
    case capnp::DynamicValue::LIST:
      for (auto e : v.as<capnp::DynamicList>()) ReadAll(e);
      break;
    case capnp::DynamicValue::STRUCT:
      ReadStruct(v.as<capnp::DynamicStruct>());
      break;
    default:
      break;
  }
}

void FuzzPush(wire::InMessage& m) {
  ps::PushInput in;
  std::vector<std::vector<float>> decoded;
  if (!ps::internal::ReadPushRequest(m, &in, &decoded).ok()) return;
  ps::ValidatePushInput(Options(), in).IgnoreError();
}

void FuzzPull(wire::InMessage& m) {
  for (auto t : m.envelope().getBody().getPullRequest().getTables()) {
    std::span<const uint64_t> ids;
    if (!ps::internal::ReadPullSlice(m, t, Options(), &ids).ok()) return;
    // What AnswerPull then reads: the table's dim, which validation said exists.
    (void)Options().tables.at(t.getTableId()).dim;
  }
}

void FuzzOne(const uint8_t* data, size_t size) {
  // The server's own limits (ServerOptions::limits).
  auto decoded = wire::InMessage::Decode(SplitFrames(data, size), wire::DecodeLimits{});
  if (!decoded.ok()) return;
  wire::InMessage& m = *decoded;
  ReadStruct(capnp::toDynamic(m.envelope()));
  (void)wire::ReadIdentity(m.header()).Who();
  if (m.is_reply()) {
    wire::ReplyStatus(m).IgnoreError();
    return;
  }
  for (size_t i = 0; i < m.bulk_count(); ++i) {
    auto words = m.BulkAs<uint64_t>(i);
    if (words.ok() && !words->empty()) (void)(*words)[words->size() - 1];
  }
  switch (m.envelope().getBody().which()) {
    case Envelope::Body::PUSH_REQUEST:
      FuzzPush(m);
      break;
    case Envelope::Body::PULL_REQUEST:
      FuzzPull(m);
      break;
    default:
      break;
  }
}

// ---- Seeds: valid messages of the kinds the server answers, in the input layout above. ----

std::vector<uint64_t> OwnedIds(uint32_t table, size_t n) {
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; ids.size() < n; ++id)
    if (ShardOf(table, id, Options().num_shards) == Options().shard_index) ids.push_back(id);
  return ids;
}

wire::OutMessage Request(uint32_t sender) {
  wire::OutMessage out;
  wire::Identity id;
  id.role = wire::Role::WORKER;
  id.index = sender;
  id.incarnation = 1;
  wire::WriteHeader(out.envelope().initHeader(), id, 7, 1000);
  return out;
}

void AddSlice(wire::OutMessage* out, wire::TableSlice::Builder s, uint32_t table, bool grads) {
  const uint32_t dim = Options().tables[table].dim;
  auto ids = OwnedIds(table, 3);
  s.setTableId(table);
  s.setCount(static_cast<uint32_t>(ids.size()));
  s.setDim(dim);
  s.setIdsFrame(static_cast<uint16_t>(out->bulk_count()));
  out->AddBulkCopy(ids.data(), ids.size() * sizeof(uint64_t));
  if (!grads) return;
  std::vector<float> g(ids.size() * dim, 0.25f);
  s.setValuesFrame(static_cast<uint16_t>(out->bulk_count()));
  out->AddBulkCopy(g.data(), g.size() * sizeof(float));
}

std::vector<wire::OutMessage> SeedMessages() {
  std::vector<wire::OutMessage> seeds;
  {
    auto m = Request(1);
    auto push = m.envelope().getBody().initPushRequest();
    push.setStep(3);
    push.setRank(1);
    auto tables = push.initTables(2);
    AddSlice(&m, tables[0], 1, true);
    AddSlice(&m, tables[1], 2, true);
    seeds.push_back(std::move(m));
  }
  {
    auto m = Request(0);
    auto pull = m.envelope().getBody().initPullRequest();
    pull.setStep(4);
    auto tables = pull.initTables(2);
    AddSlice(&m, tables[0], 0, false);
    AddSlice(&m, tables[1], 2, false);
    seeds.push_back(std::move(m));
  }
  {
    auto m = Request(2);
    m.envelope().getBody().initPing().setPayload(
        capnp::Data::Reader(reinterpret_cast<const capnp::byte*>("ping"), 4));
    seeds.push_back(std::move(m));
  }
  {
    auto m = Request(2);
    auto reg = m.envelope().getBody().initRegisterRequest();
    reg.setAddress("tcp://127.0.0.1:5555");
    reg.setHost("worker-host");
    seeds.push_back(std::move(m));
  }
  {
    auto m = Request(0);
    auto commit = m.envelope().getBody().initCommitCheckpointRequest();
    commit.initParts(2).set(0, "{\"name\": \"part\"}");
    seeds.push_back(std::move(m));
  }
  {
    auto m = Request(3);
    m.envelope().getBody().initCheckpointPartRequest().initRetainedSteps(2).set(1, 100);
    seeds.push_back(std::move(m));
  }
  {
    auto m = Request(1);
    m.envelope().setIsReply(true);
    auto reply = m.envelope().initReply();
    reply.setCode(wire::ReplyCode::STALE);
    reply.setMessage("behind");
    reply.initView().setAppliedStep(5);
    seeds.push_back(std::move(m));
  }
  return seeds;
}

std::string Serialize(std::vector<zmq::message_t> frames) {
  std::string out(1, static_cast<char>(frames.size() - 1));
  for (const auto& f : frames) {
    out.push_back(static_cast<char>(f.size() & 0xff));
    out.push_back(static_cast<char>((f.size() >> 8) & 0xff));
  }
  for (const auto& f : frames) out.append(static_cast<const char*>(f.data()), f.size());
  return out;
}

void WriteSeeds(const std::string& dir) {
  int i = 0;
  for (auto& m : SeedMessages()) {
    auto frames = std::move(m).Finish();
    if (frames.size() - 1 > kMaxBulkFrames || frames[0].size() > 0xffff) std::abort();
    std::ofstream(dir + "/seed-" + std::to_string(i++), std::ios::binary)
        << Serialize(std::move(frames));
  }
}

}  // namespace
}  // namespace tandem::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("TANDEM_FUZZ_WRITE_SEEDS")) {
    tandem::fuzz::WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::fuzz::FuzzOne(data, size);
  return 0;
}
