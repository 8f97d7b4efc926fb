// The PS service over loopback in one process: PsClient <-> RpcServer + PsService + Shard.
#include "server/ps/ps_service.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "common/ps_client.h"
#include "common/testing/local_embedding_table.h"
#include "server/ps/shard_test_util.h"

namespace tandem::ps {
namespace {

using namespace testing;  // NOLINT: test helpers
using std::chrono::milliseconds;
using ::tandem::testing::TempDir;

wire::Identity Worker(uint32_t rank, uint64_t incarnation = 1) {
  wire::Identity id;
  id.role = wire::Role::WORKER;
  id.index = rank;
  id.incarnation = incarnation;
  return id;
}

class PsServiceTest : public ::testing::Test {
 protected:
  void Start(uint32_t workers, int handler_threads = 4, int64_t k = 0) {
    options_ = SmallShard(dir_.path() + "/shard", workers, k);
    options_.durable_dir = dir_.path() + "/durable";
    auto s = Shard::Open(options_);
    ASSERT_TRUE(s.ok()) << s.status();
    shard_ = std::move(s).value();
    wire::ServerOptions so;
    so.lanes = PsLanes(handler_threads);
    server_ = std::make_unique<wire::RpcServer>(&context_, so, wire::Identity{});
    service_ = std::make_unique<PsService>(shard_.get(), server_.get());
    service_->Register();
    ASSERT_TRUE(server_->Start().ok());
  }
  PsClient Client(uint32_t rank, uint64_t incarnation = 1) {
    PsClientOptions o;
    o.shards = {server_->endpoint()};
    for (const auto& t : options_.tables) o.dims.push_back(t.dim);
    o.timeout = milliseconds(20000);
    return PsClient(&context_, Worker(rank, incarnation), o);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  TempDir dir_;
  ShardOptions options_;
  zmq::context_t context_{2};
  std::unique_ptr<Shard> shard_;
  std::unique_ptr<wire::RpcServer> server_;
  std::unique_ptr<PsService> service_;
};

// A worker-side client trains embeddings through the service: rows move toward a target.
TEST_F(PsServiceTest, ClientTrainsEmbeddingsTowardATarget) {
  Start(1);
  PsClient client = Client(0);
  std::vector<uint64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6};  // repeats are de-duplicated by the client
  std::vector<uint64_t> unique = {3, 1, 4, 5, 9, 2, 6};
  auto loss = [&](const std::vector<float>& rows) {
    double l = 0;
    for (float v : rows) l += (v - 1.0) * (v - 1.0);
    return l;
  };
  double first = -1, last = -1;
  for (int64_t step = 0; step < 60; ++step) {
    std::vector<std::vector<float>> rows;
    TableIds t{1, ids};
    ASSERT_TRUE(client.Pull(step, {&t, 1}, &rows).ok());
    ASSERT_EQ(rows[0].size(), ids.size() * 8);
    // Repeated ids come back identical, in request order.
    EXPECT_TRUE(std::equal(rows[0].begin() + 8, rows[0].begin() + 16, rows[0].begin() + 24));
    if (first < 0) first = loss(rows[0]);
    last = loss(rows[0]);
    std::vector<float> grads;
    std::vector<std::vector<float>> unique_rows;
    TableIds u{1, unique};
    ASSERT_TRUE(client.Pull(step, {&u, 1}, &unique_rows).ok());
    for (float v : unique_rows[0]) grads.push_back(2 * (v - 1.0f));
    TableGrads g{1, unique, grads};
    ASSERT_TRUE(client.Push(step, {&g, 1}).ok());
  }
  EXPECT_LT(last, first * 0.01) << "first loss " << first << ", last " << last;
  EXPECT_EQ(shard_->applied_step(), 59);
  EXPECT_LE(client.retained_pushes(), 1u);
}

// A large pull is answered in frames of whole rows (TableSlice.valuesFrames, about 256 KiB
// each); the client puts every row where its id asked for it, repeated ids included.
TEST_F(PsServiceTest, LargePullIsAnsweredInFramesOfWholeRows) {
  Start(1);
  const uint32_t dim = options_.tables[1].dim;
  std::vector<uint64_t> ids(3 * PullFrameRows(dim) + 123);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 7919 + 1;
  PsClient client = Client(0);
  std::vector<float> grads(ids.size() * dim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * static_cast<float>(i % 97);
  TableGrads g{1, ids, grads};
  ASSERT_TRUE(client.Push(0, {&g, 1}).ok());
  std::vector<float> expect(ids.size() * dim);
  ASSERT_TRUE(shard_->Read(1, ids, expect.data()).ok());

  wire::RpcClient raw(&context_, Worker(0));
  int h = *raw.Connect(server_->endpoint());
  wire::OutMessage m;
  auto req = m.envelope().getBody().initPullRequest();
  req.setStep(1);
  auto t = req.initTables(1);
  t[0].setTableId(1);
  t[0].setCount(static_cast<uint32_t>(ids.size()));
  t[0].setDim(dim);
  t[0].setIdsFrame(0);
  m.AddBulkCopy(ids.data(), ids.size() * sizeof(uint64_t));
  auto r = raw.Call(h, std::move(m), milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status();
  auto slice = r->envelope().getBody().getPullReply().getTables()[0];
  ASSERT_EQ(slice.getValuesFrames(), 4u);
  std::vector<float> got;
  for (uint32_t f = 0; f < slice.getValuesFrames(); ++f) {
    auto v = r->BulkAs<float>(slice.getValuesFrame() + f);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->size() % dim, 0u);
    EXPECT_LE(v->size() * sizeof(float), 256u << 10);
    got.insert(got.end(), v->begin(), v->end());
  }
  EXPECT_EQ(got, expect);

  // Through the client, with every id asked twice (the rows are de-duplicated, then spread).
  std::vector<uint64_t> twice = ids;
  twice.insert(twice.end(), ids.rbegin(), ids.rend());
  std::vector<std::vector<float>> rows;
  TableIds both{1, twice};
  ASSERT_TRUE(client.Pull(1, {&both, 1}, &rows).ok());
  ASSERT_EQ(rows[0].size(), twice.size() * dim);
  EXPECT_TRUE(std::equal(expect.begin(), expect.end(), rows[0].begin()));
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_TRUE(std::equal(&expect[i * dim], &expect[(i + 1) * dim],
                           &rows[0][(twice.size() - 1 - i) * dim]))
        << i;
}

// A reply whose frames do not hold whole rows, or hold more rows than were asked for, is a
// clear error at the client, never a write past the rows it asked for.
TEST(PsClientRepliesTest, PullReplyFramesOfPartialOrExtraRowsAreRefused) {
  zmq::context_t context(1);
  enum class Bad { kPartialRow, kExtraRows, kMissingFrame } bad = Bad::kPartialRow;
  wire::ServerOptions so;
  so.lanes = PsLanes(2);
  wire::RpcServer fake(&context, so, wire::Identity{});
  fake.Handle(wire::Envelope::Body::PULL_REQUEST, 0, [&](wire::InMessage& m, wire::Responder r) {
    const uint32_t count = m.envelope().getBody().getPullRequest().getTables()[0].getCount();
    wire::OutMessage reply = r.NewReply();
    auto t = reply.envelope().getBody().initPullReply().initTables(1);
    t[0].setTableId(0);
    t[0].setCount(count);
    t[0].setDim(4);
    t[0].setValuesFrame(0);
    t[0].setValuesFrames(2);
    const size_t first = bad == Bad::kPartialRow ? 4 * 1 + 2 : 4 * 1;
    const size_t second = bad == Bad::kExtraRows ? 4 * (count + 3) : 4 * count - first;
    reply.AddBulkVector(std::vector<float>(first, 1.0f));
    if (bad != Bad::kMissingFrame) reply.AddBulkVector(std::vector<float>(second, 2.0f));
    r.Send(std::move(reply));
  });
  ASSERT_TRUE(fake.Start().ok());
  PsClientOptions o;
  o.shards = {fake.endpoint()};
  o.dims = {4};
  o.timeout = milliseconds(5000);
  PsClient client(&context, Worker(0), o);
  std::vector<uint64_t> ids = {1, 2, 3, 4, 5};
  TableIds t{0, ids};
  for (Bad b : {Bad::kPartialRow, Bad::kExtraRows, Bad::kMissingFrame}) {
    bad = b;
    std::vector<std::vector<float>> rows;
    const Status s = client.Pull(0, {&t, 1}, &rows);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  }
  fake.Stop();
}

// Scenario 4: eight workers, four handler threads; seven pull early for step s+1 while one push
// for step s is late. Parked pulls hold no thread, so the late push gets in and all finish.
TEST_F(PsServiceTest, EarlyPullsDoNotBlockALatePush) {
  Start(8, /*handler_threads=*/4);
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (uint32_t r = 0; r < 8; ++r) {
    threads.emplace_back([&, r] {
      PsClient c = Client(r);
      std::vector<uint64_t> ids = {r + 1u, 100};
      for (int64_t step = 0; step < 3; ++step) {
        std::vector<std::vector<float>> rows;
        TableIds t{0, ids};
        ASSERT_TRUE(c.Pull(step, {&t, 1}, &rows).ok());
        if (r == 7) std::this_thread::sleep_for(milliseconds(300));  // the late one
        std::vector<float> grads(ids.size() * 4, 0.01f);
        TableGrads g{0, ids, grads};
        ASSERT_TRUE(c.Push(step, {&g, 1}).ok());
      }
      done++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done, 8);
  EXPECT_EQ(shard_->applied_step(), 2);
  EXPECT_GT(service_->stats().parked, 0u);
}

TEST_F(PsServiceTest, ZombieIncarnationIsAnsweredStale) {
  Start(1);
  PsClient fresh = Client(0, /*incarnation=*/2);
  std::vector<uint64_t> ids = {1};
  std::vector<float> grads(4, 1.0f);
  TableGrads g{0, ids, grads};
  ASSERT_TRUE(fresh.Push(0, {&g, 1}).ok());
  PsClient zombie = Client(0, /*incarnation=*/1);
  Status s = zombie.Push(1, {&g, 1});
  EXPECT_TRUE(s.IsAborted()) << s;
  std::vector<std::vector<float>> rows;
  TableIds t{0, ids};
  EXPECT_TRUE(zombie.Pull(1, {&t, 1}, &rows).IsAborted());
  EXPECT_EQ(shard_->stats().pushes_logged, 1u);
  EXPECT_EQ(shard_->applied_step(), 0);
}

// Only a logged push raises the fencing bar: a stray pull claiming a huge incarnation must not
// fence the live worker out.
TEST_F(PsServiceTest, StrayRequestCannotFenceOutALiveWorker) {
  Start(1);
  PsClient stray = Client(0, /*incarnation=*/1ull << 62);
  std::vector<uint64_t> ids = {1};
  std::vector<std::vector<float>> rows;
  TableIds t{0, ids};
  ASSERT_TRUE(stray.Pull(0, {&t, 1}, &rows).ok());
  PsClient live = Client(0, /*incarnation=*/1);
  std::vector<float> grads(4, 1.0f);
  TableGrads g{0, ids, grads};
  EXPECT_TRUE(live.Push(0, {&g, 1}).ok());
}

// One table's slice of a push: which frames hold its ids and values, and their precision.
void Slice(wire::TableSlice::Builder t, uint32_t table, uint32_t count, uint32_t dim,
           uint32_t ids_frame, uint32_t values_frame, uint8_t precision) {
  t.setTableId(table);
  t.setCount(count);
  t.setDim(dim);
  t.setIdsFrame(ids_frame);
  t.setValuesFrame(values_frame);
  t.setPrecision(precision);
}

TEST_F(PsServiceTest, HostileRequestsGetInvalidAndChangeNothing) {
  Start(1);
  wire::RpcClient raw(&context_, Worker(0));
  int h = *raw.Connect(server_->endpoint());
  auto send = [&](std::function<void(wire::OutMessage&)> fill) {
    wire::OutMessage m;
    fill(m);
    auto r = raw.Call(h, std::move(m), milliseconds(5000));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->reply_code() : wire::ReplyCode::OK;
  };
  std::vector<uint64_t> ids = {1, 2};
  // Push whose slice points at a frame that does not exist.
  EXPECT_EQ(send([&](wire::OutMessage& m) {
              auto t = m.envelope().getBody().initPushRequest().initTables(1);
              Slice(t[0], 0, 2, 4, 5, 6, 0);
            }),
            wire::ReplyCode::INVALID);
  // Count disagrees with the ids frame.
  EXPECT_EQ(send([&](wire::OutMessage& m) {
              auto t = m.envelope().getBody().initPushRequest().initTables(1);
              Slice(t[0], 0, 3, 4, 0, 1, 0);
              m.AddBulkCopy(ids.data(), 16);
              std::vector<float> g(8, 0.f);
              m.AddBulkCopy(g.data(), 32);
            }),
            wire::ReplyCode::INVALID);
  // Gradient frame of 7 bytes.
  EXPECT_EQ(send([&](wire::OutMessage& m) {
              auto t = m.envelope().getBody().initPushRequest().initTables(1);
              Slice(t[0], 0, 2, 4, 0, 1, 0);
              m.AddBulkCopy(ids.data(), 16);
              m.AddBulkCopy("1234567", 7);
            }),
            wire::ReplyCode::INVALID);
  // Gradients split over frames (valuesFrames > 1): only pull replies are split.
  EXPECT_EQ(send([&](wire::OutMessage& m) {
              auto t = m.envelope().getBody().initPushRequest().initTables(1);
              Slice(t[0], 0, 2, 4, 0, 1, 0);
              t[0].setValuesFrames(2);
              m.AddBulkCopy(ids.data(), 16);
              std::vector<float> g(8, 0.f);  // the first frame alone would be a whole push
              m.AddBulkCopy(g.data(), 32);
              m.AddBulkCopy(g.data(), 32);
            }),
            wire::ReplyCode::INVALID);
  // bf16 gradients (ps.wire_precision): a frame whose size is not count x dim, one frame named
  // by two tables (it would be decoded twice), and an unknown precision.
  std::vector<uint16_t> half(8, 0x3F80);
  std::vector<uint64_t> one = {9};
  EXPECT_EQ(send([&](wire::OutMessage& m) {
              auto t = m.envelope().getBody().initPushRequest().initTables(1);
              Slice(t[0], 0, 2, 4, 0, 1, 1);
              m.AddBulkCopy(ids.data(), 16);
              m.AddBulkCopy(half.data(), 12);
            }),
            wire::ReplyCode::INVALID);
  EXPECT_EQ(send([&](wire::OutMessage& m) {
              auto t = m.envelope().getBody().initPushRequest().initTables(2);
              Slice(t[0], 0, 2, 4, 0, 1, 1);
              Slice(t[1], 1, 1, 8, 2, 1, 1);
              m.AddBulkCopy(ids.data(), 16);
              m.AddBulkCopy(half.data(), 16);
              m.AddBulkCopy(one.data(), 8);
            }),
            wire::ReplyCode::INVALID);
  EXPECT_EQ(send([&](wire::OutMessage& m) {
              auto t = m.envelope().getBody().initPushRequest().initTables(1);
              Slice(t[0], 0, 2, 4, 0, 1, 7);
              m.AddBulkCopy(ids.data(), 16);
              m.AddBulkCopy(half.data(), 16);
            }),
            wire::ReplyCode::INVALID);
  EXPECT_EQ(send([&](wire::OutMessage& m) {
              auto req = m.envelope().getBody().initPullRequest();
              req.setPrecision(9);
              auto t = req.initTables(1);
              t[0].setTableId(0);
              t[0].setCount(2);
              t[0].setIdsFrame(0);
              m.AddBulkCopy(ids.data(), 16);
            }),
            wire::ReplyCode::INVALID);
  // Pull of an unknown table, and a pull with a wrong dim.
  EXPECT_EQ(send([&](wire::OutMessage& m) {
              auto t = m.envelope().getBody().initPullRequest().initTables(1);
              t[0].setTableId(77);
              t[0].setCount(2);
              t[0].setIdsFrame(0);
              m.AddBulkCopy(ids.data(), 16);
            }),
            wire::ReplyCode::INVALID);
  EXPECT_EQ(send([&](wire::OutMessage& m) {
              auto t = m.envelope().getBody().initPullRequest().initTables(1);
              t[0].setTableId(0);
              t[0].setCount(2);
              t[0].setDim(5);
              t[0].setIdsFrame(0);
              m.AddBulkCopy(ids.data(), 16);
            }),
            wire::ReplyCode::INVALID);
  // A push claiming another rank than its sender.
  EXPECT_EQ(send([&](wire::OutMessage& m) { m.envelope().getBody().initPushRequest().setRank(3); }),
            wire::ReplyCode::INVALID);
  EXPECT_TRUE(Rows(shard_.get()).empty());
  EXPECT_EQ(shard_->stats().pushes_logged, 0u);
  // Still serving.
  PsClient c = Client(0);
  std::vector<float> grads(8, 0.5f);
  TableGrads g{0, ids, grads};
  EXPECT_TRUE(c.Push(0, {&g, 1}).ok());
}

// A pull parked longer than one attempt's budget is answered NOT_READY and sent again: waiting
// for a slow worker is never reported as a timeout.
TEST_F(PsServiceTest, LongParkedPullIsResentNotTimedOut) {
  Start(2);
  PsClientOptions o;
  o.shards = {server_->endpoint()};
  for (const auto& t : options_.tables) o.dims.push_back(t.dim);
  o.attempt_budget = milliseconds(200);
  o.timeout = milliseconds(20000);
  PsClient waiting(&context_, Worker(0), o);
  std::vector<uint64_t> ids = {1};
  std::vector<float> grads(4, 0.5f);
  TableGrads g{0, ids, grads};
  ASSERT_TRUE(waiting.Push(0, {&g, 1}).ok());
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(900));
    PsClient slow = Client(1);
    ASSERT_TRUE(slow.Push(0, {&g, 1}).ok());
  });
  std::vector<std::vector<float>> rows;
  TableIds t{0, ids};
  Status s = waiting.Pull(1, {&t, 1}, &rows);
  late.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_GT(waiting.stats().not_ready, 0u);
}

TEST_F(PsServiceTest, PullOfAPastStepAtK0IsStale) {
  Start(1);
  PsClient c = Client(0);
  std::vector<uint64_t> ids = {1};
  std::vector<float> grads(4, 0.5f);
  TableGrads g{0, ids, grads};
  ASSERT_TRUE(c.Push(0, {&g, 1}).ok());
  ASSERT_TRUE(c.Push(1, {&g, 1}).ok());
  std::vector<std::vector<float>> rows;
  TableIds t{0, ids};
  EXPECT_TRUE(c.Pull(1, {&t, 1}, &rows).IsAborted());
  EXPECT_TRUE(c.Pull(2, {&t, 1}, &rows).ok());
  EXPECT_TRUE(c.Pull(1, {&t, 1}, &rows, /*from_pre_images=*/true).ok());
}

// A replacement marks the step it goes on from; a shard that applied the next one meanwhile
// (the lost rank's late push) answers that pull from its pre-images, with the values before it.
TEST_F(PsServiceTest, PullAfterTheRecoveryStepReadsThePreImagesOfALateApply) {
  Start(1);
  PsClient c = Client(0);
  std::vector<uint64_t> ids = {1};
  std::vector<float> grads(4, 0.5f);
  TableGrads g{0, ids, grads};
  TableIds t{0, ids};
  std::vector<std::vector<float>> before, after;
  ASSERT_TRUE(c.Push(0, {&g, 1}).ok());
  ASSERT_TRUE(c.Pull(1, {&t, 1}, &before).ok());
  ASSERT_TRUE(c.Push(1, {&g, 1}).ok());
  EXPECT_TRUE(c.Pull(1, {&t, 1}, &after).IsAborted()) << "no recovery marked: stale";
  c.MarkRecoveryStep(0);
  ASSERT_TRUE(c.Pull(1, {&t, 1}, &after).ok());
  EXPECT_EQ(after, before);
  c.MarkRecoveryStep(-1);
  EXPECT_TRUE(c.Pull(1, {&t, 1}, &after).IsAborted());
  c.MarkRecoveryStep(1);
  EXPECT_TRUE(c.Pull(0, {&t, 1}, &after).IsAborted()) << "two steps back is stale";
}

wire::OutMessage ChecksumRequest(int64_t step) {
  wire::OutMessage m;
  m.envelope().getBody().initChecksumRequest().setStep(step);
  return m;
}

// PROTOCOLS §4: a checksum of a step the shard has not applied is answered RETRY with the
// shard's view; once the step is applied the reply carries the shard's sum and row count.
TEST_F(PsServiceTest, ChecksumOfAStepNotAppliedYetIsRetryThenTheShardsSum) {
  Start(1);
  wire::RpcClient raw(&context_, Worker(0));
  int h = *raw.Connect(server_->endpoint());
  auto r = raw.Call(h, ChecksumRequest(0), milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reply_code(), wire::ReplyCode::RETRY);
  EXPECT_EQ(r->envelope().getReply().getView().getAppliedStep(), -1);
  PsClient c = Client(0);
  std::vector<uint64_t> ids = {1, 2, 3};
  std::vector<float> grads(12, 0.5f);
  TableGrads g{0, ids, grads};
  ASSERT_TRUE(c.Push(0, {&g, 1}).ok());
  r = raw.Call(h, ChecksumRequest(0), milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->reply_code(), wire::ReplyCode::OK) << wire::ReplyStatus(*r);
  auto body = r->envelope().getBody().getChecksumReply();
  ModelChecksum want;
  uint64_t rows = 0;
  ASSERT_TRUE(shard_->AddToChecksum(&want, &rows).ok());
  EXPECT_EQ(ModelChecksum::FromParts(body.getHigh(), body.getLow()).Hex(), want.Hex());
  EXPECT_EQ(body.getRows(), 3u);
  EXPECT_EQ(body.getAppliedStep(), 0);
  EXPECT_EQ(service_->stats().checksums, 1u);  // the RETRY is not counted
}

// The client backs off on RETRY and gets the sum once the step is applied; a step that never
// comes is a timeout, and a nonsense step is refused.
TEST_F(PsServiceTest, ClientChecksumWaitsForTheStep) {
  Start(1);
  PsClient c = Client(0);
  std::vector<uint64_t> ids = {4, 5};
  std::vector<float> grads(8, 0.25f);
  TableGrads g{0, ids, grads};
  ASSERT_TRUE(c.Push(0, {&g, 1}).ok());
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(300));
    PsClient pusher = Client(0);
    ASSERT_TRUE(pusher.Push(1, {&g, 1}).ok());
  });
  uint64_t rows = 0;
  auto sum = c.Checksum(1, &rows);
  late.join();
  ASSERT_TRUE(sum.ok()) << sum.status();
  ModelChecksum want;
  ASSERT_TRUE(shard_->AddToChecksum(&want, nullptr).ok());
  EXPECT_EQ(sum->Hex(), want.Hex());
  EXPECT_EQ(rows, 2u);
  EXPECT_GT(c.stats().retries, 0u);
  EXPECT_EQ(c.shard_applied_step(0), 1);

  PsClientOptions o;
  o.shards = {server_->endpoint()};
  for (const auto& t : options_.tables) o.dims.push_back(t.dim);
  o.timeout = milliseconds(300);
  PsClient impatient(&context_, Worker(0), o);
  const Status unapplied = impatient.Checksum(5).status();
  EXPECT_TRUE(unapplied.IsDeadlineExceeded()) << unapplied;
  // It says which shard held it up, and its answer.
  EXPECT_NE(unapplied.message().find("(last: shard 0: "), std::string::npos) << unapplied;
  EXPECT_TRUE(impatient.Checksum(-2).status().IsInvalidArgument());
  wire::RpcClient raw(&context_, Worker(0));
  auto r = raw.Call(*raw.Connect(server_->endpoint()), ChecksumRequest(-2), milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reply_code(), wire::ReplyCode::INVALID);
}

wire::OutMessage PartRequest(int64_t step) {
  wire::OutMessage m;
  m.envelope().getBody().initCheckpointPartRequest().setStep(step);
  return m;
}

// A part request is answered at once: "copying" with progress while the copy runs in the
// background (its time grows with the table), then the part; the client waits through it
// however long it takes (each round of asking has the deadline, not the copy); a step not
// applied yet is RETRY, as before.
TEST_F(PsServiceTest, CheckpointPartIsCopiedInTheBackgroundWithProgress) {
  Start(1);
  PsClient c = Client(0);
  std::vector<uint64_t> ids(2000);
  for (uint64_t i = 0; i < ids.size(); ++i) ids[i] = i * 7919;
  std::vector<float> grads(ids.size() * 4, 0.5f);
  TableGrads g{0, ids, grads};
  ASSERT_TRUE(c.Push(0, {&g, 1}).ok());
  wire::RpcClient raw(&context_, Worker(0));
  const int h = *raw.Connect(server_->endpoint());
  auto r = raw.Call(h, PartRequest(1), milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reply_code(), wire::ReplyCode::RETRY);  // step 1 is not applied yet
  r = raw.Call(h, PartRequest(0), milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->reply_code(), wire::ReplyCode::OK) << wire::ReplyStatus(*r);
  auto first = r->envelope().getBody().getCheckpointPartReply();
  EXPECT_TRUE(first.getCopying());  // the copy was only started by this request
  EXPECT_EQ(first.getCopyingStep(), 0);
  EXPECT_TRUE(first.getPart().size() == 0);
  std::string part;
  for (int i = 0; i < 500 && part.empty(); ++i) {
    r = raw.Call(h, PartRequest(0), milliseconds(5000));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->reply_code(), wire::ReplyCode::OK) << wire::ReplyStatus(*r);
    auto body = r->envelope().getBody().getCheckpointPartReply();
    if (body.getCopying()) {
      EXPECT_LE(body.getBytesDone(), body.getBytesTotal());
      std::this_thread::sleep_for(milliseconds(10));
      continue;
    }
    part = body.getPart();
  }
  ASSERT_FALSE(part.empty()) << "the copy never finished";
  auto parsed = CheckpointPartFromJson(nlohmann::json::parse(part));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->step, 0);
  EXPECT_FALSE(parsed->files.empty());
  // The client: the same part (asked again, it is the part already made), through the polling.
  auto parts = c.CheckpointParts(0);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 1u);
  EXPECT_EQ(CheckpointPartFromJson(nlohmann::json::parse((*parts)[0]))->files, parsed->files);
  ASSERT_TRUE(c.Push(1, {&g, 1}).ok());
  parts = c.CheckpointParts(1);
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(CheckpointPartFromJson(nlohmann::json::parse((*parts)[0]))->step, 1);
  // A copy whose result nobody collects (its client gave up: a new generation, another shard
  // failed), then a request for a later step: the shard serves it (and does not die).
  ASSERT_TRUE(c.Push(2, {&g, 1}).ok());
  r = raw.Call(h, PartRequest(2), milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->envelope().getBody().getCheckpointPartReply().getCopying());
  std::this_thread::sleep_for(milliseconds(300));  // step 2's copy finishes, uncollected
  ASSERT_TRUE(c.Push(3, {&g, 1}).ok());
  parts = c.CheckpointParts(3);
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(CheckpointPartFromJson(nlohmann::json::parse((*parts)[0]))->step, 3);
}

// Part requests for one step from several connections at once (the push lane has several
// threads, and a client resends after its attempt budget): one copy, every answer consistent.
TEST_F(PsServiceTest, ConcurrentPartRequestsStartOneCopy) {
  Start(1);
  PsClient c = Client(0);
  std::vector<uint64_t> ids(3000);
  for (uint64_t i = 0; i < ids.size(); ++i) ids[i] = i * 104729;
  std::vector<float> grads(ids.size() * 4, 0.25f);
  TableGrads g{0, ids, grads};
  ASSERT_TRUE(c.Push(0, {&g, 1}).ok());
  std::vector<std::string> got(6);
  std::vector<std::thread> askers;
  for (size_t k = 0; k < got.size(); ++k)
    askers.emplace_back([&, k] {
      PsClient mine = Client(0);
      auto parts = mine.CheckpointParts(0);
      if (parts.ok()) got[k] = (*parts)[0];
    });
  for (auto& t : askers) t.join();
  for (const std::string& part : got) {
    ASSERT_FALSE(part.empty());
    EXPECT_EQ(CheckpointPartFromJson(nlohmann::json::parse(part))->files,
              CheckpointPartFromJson(nlohmann::json::parse(got[0]))->files);
  }
}

// ps.wire_precision bf16 / fp16: a pull answers the shard's fp32 rows rounded to the format, and
// a push applies gradients exactly as if they had been rounded before an fp32 push (the shard
// keeps fp32 state): the same model as a worker that rounds its own gradients.
TEST(PsWirePrecisionTest, HalfPrecisionPullsAndPushesEqualRoundedFp32) {
  for (WirePrecision precision : {WirePrecision::kBf16, WirePrecision::kFp16}) {
    zmq::context_t context(2);
    TempDir half_dir, full_dir;
    std::unique_ptr<Shard> shards[2];
    std::unique_ptr<wire::RpcServer> servers[2];
    std::unique_ptr<PsService> services[2];
    std::vector<std::unique_ptr<PsClient>> clients;
    for (int i = 0; i < 2; ++i) {
      auto o = SmallShard((i == 0 ? half_dir : full_dir).path(), 1);
      auto s = Shard::Open(o);
      ASSERT_TRUE(s.ok()) << s.status();
      shards[i] = std::move(s).value();
      wire::ServerOptions so;
      so.lanes = PsLanes(2);
      servers[i] = std::make_unique<wire::RpcServer>(&context, so, wire::Identity{});
      services[i] = std::make_unique<PsService>(shards[i].get(), servers[i].get());
      services[i]->Register();
      ASSERT_TRUE(servers[i]->Start().ok());
      PsClientOptions co;
      co.shards = {servers[i]->endpoint()};
      for (const auto& t : o.tables) co.dims.push_back(t.dim);
      co.timeout = milliseconds(20000);
      co.wire_precision = i == 0 ? precision : WirePrecision::kFp32;
      clients.push_back(std::make_unique<PsClient>(&context, Worker(0), co));
    }
    std::vector<uint64_t> ids = {3, 17, 40, 41};
    for (int64_t step = 0; step < 5; ++step) {
      std::vector<float> grads(ids.size() * 4);
      for (size_t j = 0; j < grads.size(); ++j)
        grads[j] = 0.0123f * static_cast<float>(j + 1) - 0.07f * static_cast<float>(step);
      std::vector<uint16_t> half(grads.size());
      std::vector<float> rounded(grads.size());
      EncodeHalf(precision, grads, half);
      DecodeHalf(precision, half, rounded);
      ASSERT_NE(rounded, grads);  // the test must see the rounding
      TableGrads g_half{0, ids, grads}, g_full{0, ids, rounded};
      ASSERT_TRUE(clients[0]->Push(step, {&g_half, 1}).ok());
      ASSERT_TRUE(clients[1]->Push(step, {&g_full, 1}).ok());
      TableIds t{0, ids};
      std::vector<std::vector<float>> rows_half, rows_full;
      ASSERT_TRUE(clients[0]->Pull(step + 1, {&t, 1}, &rows_half).ok());
      ASSERT_TRUE(clients[1]->Pull(step + 1, {&t, 1}, &rows_full).ok());
      std::vector<uint16_t> enc(rows_full[0].size());
      std::vector<float> want(rows_full[0].size());
      EncodeHalf(precision, rows_full[0], enc);
      DecodeHalf(precision, enc, want);
      EXPECT_EQ(rows_half[0], want) << "step " << step;
    }
    ModelChecksum a, b;
    ASSERT_TRUE(shards[0]->AddToChecksum(&a, nullptr).ok());
    ASSERT_TRUE(shards[1]->AddToChecksum(&b, nullptr).ok());
    EXPECT_EQ(a.Hex(), b.Hex());
    for (auto& s : servers) s->Stop();
  }
}

// The key property: training through PsClient on two shards and training a LocalEmbeddingTable
// with the same gradients give the same model_checksum.
TEST(PsChecksumTest, TwoShardsThroughTheClientEqualTheLocalTable) {
  constexpr uint32_t kShards = 2;
  zmq::context_t context(2);
  TempDir dirs[kShards];
  std::unique_ptr<Shard> shards[kShards];
  std::unique_ptr<wire::RpcServer> servers[kShards];
  std::unique_ptr<PsService> services[kShards];
  PsClientOptions co;
  co.timeout = milliseconds(20000);
  std::vector<embedding::TableSpec> tables;
  for (uint32_t i = 0; i < kShards; ++i) {
    auto o = SmallShard(dirs[i].path(), 1);
    o.tables.push_back(Spec(2, 4, embedding::OptimizerKind::kAdam));
    o.shard_index = i;
    o.num_shards = kShards;
    tables = o.tables;
    auto s = Shard::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    shards[i] = std::move(s).value();
    wire::ServerOptions so;
    so.lanes = PsLanes(2);
    servers[i] = std::make_unique<wire::RpcServer>(&context, so, wire::Identity{});
    services[i] = std::make_unique<PsService>(shards[i].get(), servers[i].get());
    services[i]->Register();
    ASSERT_TRUE(servers[i]->Start().ok());
    co.shards.push_back(servers[i]->endpoint());
  }
  for (const auto& t : tables) co.dims.push_back(t.dim);
  PsClient client(&context, Worker(0), co);
  LocalEmbeddingTable local(tables, shards[0]->options().seed);
  for (int64_t step = 0; step < 12; ++step) {
    std::vector<std::vector<uint64_t>> ids(tables.size());
    std::vector<std::vector<float>> grads(tables.size());
    std::vector<TableGrads> g;
    for (uint32_t t = 0; t < tables.size(); ++t) {
      for (uint64_t id = step % 3; id < 40; id += 3 + t) {
        ids[t].push_back(id);
        auto v = Grad(step, 0, t, id, tables[t].dim);
        grads[t].insert(grads[t].end(), v.begin(), v.end());
      }
      g.push_back({t, ids[t], grads[t]});
    }
    ASSERT_TRUE(client.Push(step, g).ok());
    ASSERT_TRUE(local.Push(step, g).ok());
  }
  for (uint32_t i = 0; i < kShards; ++i) {
    uint64_t rows = 0;
    ModelChecksum part;
    ASSERT_TRUE(shards[i]->AddToChecksum(&part, &rows).ok());
    EXPECT_GT(rows, 0u) << "shard " << i << " holds nothing: the test would prove little";
  }
  uint64_t rows = 0;
  auto sum = client.Checksum(11, &rows);
  ASSERT_TRUE(sum.ok()) << sum.status();
  ModelChecksum want;
  local.AddToChecksum(&want);
  EXPECT_EQ(sum->Hex(), want.Hex());
  EXPECT_EQ(rows, local.rows_stored());

  // Pulls across both shards, the ids said to be unique (the client then skips its own
  // de-duplication) or not; said wrongly, every position still gets its row.
  std::vector<uint64_t> all(45);
  std::iota(all.begin(), all.end(), 0);  // 40..44 never pushed: initial rows
  std::vector<uint64_t> repeated = all;
  repeated.insert(repeated.end(), all.rbegin(), all.rbegin() + 10);
  for (uint32_t t = 0; t < tables.size(); ++t) {
    const TableIds ask{t, all}, ask_unique{t, all, /*unique=*/true},
        ask_repeated{t, repeated, /*unique=*/true};
    std::vector<std::vector<float>> want_rows, plain, unique, twice;
    ASSERT_TRUE(local.Pull(12, {&ask, 1}, &want_rows).ok());
    ASSERT_TRUE(client.Pull(12, {&ask, 1}, &plain).ok());
    ASSERT_TRUE(client.Pull(12, {&ask_unique, 1}, &unique).ok());
    ASSERT_TRUE(client.Pull(12, {&ask_repeated, 1}, &twice).ok());
    EXPECT_EQ(plain, want_rows) << "table " << t;
    EXPECT_EQ(unique, want_rows) << "table " << t;
    const size_t dim = tables[t].dim;
    ASSERT_EQ(twice[0].size(), repeated.size() * dim);
    for (size_t j = 0; j < repeated.size(); ++j)
      EXPECT_TRUE(std::equal(&twice[0][j * dim], &twice[0][(j + 1) * dim],
                             &want_rows[0][repeated[j] * dim]))
          << "table " << t << " position " << j;
  }
  for (auto& s : servers) s->Stop();
}

}  // namespace
}  // namespace tandem::ps
