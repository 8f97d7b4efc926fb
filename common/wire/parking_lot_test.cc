#include "common/wire/parking_lot.h"

#include <gtest/gtest.h>

#include "common/wire/rpc_client.h"

namespace tandem::wire {
namespace {

using std::chrono::milliseconds;

// A server whose ECHO handler parks every request under the key in its note, and whose PING
// releases keys up to its payload's first byte.
class ParkingLotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Identity id;
    id.role = Role::PS;
    ServerOptions options;
    options.lanes = {LaneOptions{"one", 1}};
    server_ = std::make_unique<RpcServer>(&context_, options, id);
    server_->Handle(Envelope::Body::ECHO, 0, [this](InMessage& m, Responder r) {
      lot_.Park(std::stoll(m.envelope().getBody().getEcho().getNote().cStr()), std::move(r));
    });
    server_->Handle(Envelope::Body::PING, 0, [this](InMessage& m, Responder r) {
      auto payload = m.envelope().getBody().getPing().getPayload();
      for (auto& p : lot_.ReleaseUpTo(payload.size() ? payload[0] : 0))
        p.responder.Send(p.responder.NewReply());
      r.Send(r.NewReply());
    });
    ASSERT_TRUE(server_->Start().ok());
    client_ = std::make_unique<RpcClient>(&context_, Identity{});
    handle_ = *client_->Connect(server_->endpoint());
  }
  void TearDown() override { server_->Stop(); }

  uint64_t Park(int key, milliseconds budget) {
    OutMessage m;
    m.envelope().getBody().initEcho().setNote(std::to_string(key));
    return *client_->Send(handle_, std::move(m), budget);
  }
  void Release(uint8_t up_to) {
    OutMessage m;
    uint8_t b[1] = {up_to};
    m.envelope().getBody().initPing().setPayload(kj::arrayPtr(b, 1));
    ASSERT_TRUE(client_->Call(handle_, std::move(m), milliseconds(5000)).ok());
  }

  zmq::context_t context_{1};
  ParkingLot lot_{milliseconds(50)};
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<RpcClient> client_;
  int handle_ = -1;
};

TEST_F(ParkingLotTest, ReleaseAnswersOnlyKeysUpToTheBound) {
  std::vector<uint64_t> ids = {Park(1, milliseconds(10000)), Park(2, milliseconds(10000)),
                               Park(3, milliseconds(10000))};
  for (int i = 0; i < 400 && lot_.size() < 3; ++i) std::this_thread::sleep_for(milliseconds(5));
  ASSERT_EQ(lot_.size(), 3u);
  Release(2);
  auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  EXPECT_EQ(client_->Wait(ids[0], deadline)->reply_code(), ReplyCode::OK);
  EXPECT_EQ(client_->Wait(ids[1], deadline)->reply_code(), ReplyCode::OK);
  EXPECT_EQ(lot_.size(), 1u);
  Release(3);
  EXPECT_EQ(client_->Wait(ids[2], deadline)->reply_code(), ReplyCode::OK);
}

TEST_F(ParkingLotTest, ParkedRequestGetsNotReadyJustBeforeItsBudgetEnds) {
  auto t0 = std::chrono::steady_clock::now();
  uint64_t id = Park(7, milliseconds(300));
  auto r = client_->Wait(id, t0 + milliseconds(2000));
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(r.ok()) << r.status();  // an answer, not a client-side timeout
  EXPECT_EQ(r->reply_code(), ReplyCode::NOT_READY);
  EXPECT_GE(elapsed, milliseconds(200));
  EXPECT_LT(elapsed, milliseconds(1500));  // generous: CI machines are loaded
  EXPECT_EQ(lot_.not_ready_sent(), 1u);
  EXPECT_EQ(lot_.size(), 0u);
}

}  // namespace
}  // namespace tandem::wire
