#include "common/wire/message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/wire/identity.h"

namespace tandem::wire {
namespace {

std::vector<zmq::message_t> Sample(std::vector<uint64_t> ids) {
  OutMessage m;
  Identity id;
  id.job_id = {1, 2};
  id.role = Role::WORKER;
  id.index = 3;
  id.incarnation = 9;
  WriteHeader(m.envelope().initHeader(), id, 42, 1000);
  m.envelope().getBody().initEcho().setNote("hi");
  m.AddBulkVector(std::move(ids));
  return std::move(m).Finish();
}

TEST(MessageTest, RoundTripKeepsHeaderBodyAndBulk) {
  auto decoded = InMessage::Decode(Sample({7, 8, 9}), DecodeLimits{});
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->request_id(), 42u);
  Identity id = ReadIdentity(decoded->header());
  EXPECT_EQ(id.job_id, (JobId{1, 2}));
  EXPECT_EQ(id.role, Role::WORKER);
  EXPECT_EQ(id.index, 3u);
  EXPECT_EQ(id.incarnation, 9u);
  EXPECT_EQ(decoded->envelope().getBody().which(), Envelope::Body::ECHO);
  auto ids = decoded->BulkAs<uint64_t>(0);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ((*ids)[2], 9u);
}

TEST(MessageTest, MisalignedFramesAreCopiedNotRejected) {
  auto frames = Sample({1, 2, 3, 4});
  // Rebuild each frame at an odd offset inside a larger buffer, as libzmq delivers small frames.
  std::vector<zmq::message_t> shifted;
  std::vector<std::unique_ptr<char[]>> keep;
  for (auto& f : frames) {
    keep.emplace_back(new char[f.size() + 3]);
    std::memcpy(keep.back().get() + 3, f.data(), f.size());
    shifted.emplace_back(keep.back().get() + 3, f.size(), nullptr, nullptr);
  }
  auto decoded = InMessage::Decode(std::move(shifted), DecodeLimits{});
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  auto ids = decoded->BulkAs<uint64_t>(0);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ids->data()) % alignof(uint64_t), 0u);
  EXPECT_EQ((*ids)[3], 4u);
}

// Bounds are fine, types are not: Envelope's first pointer (Header, a struct) is a Ping's Data.
// Found by tests/fuzz/message_fuzz.cc: the read used to throw after Decode had succeeded.
TEST(MessageTest, RejectsPointerOfAnotherType) {
  capnp::MallocMessageBuilder builder;
  const capnp::byte payload[] = {1, 2, 3};
  builder.initRoot<Ping>().setPayload(capnp::Data::Reader(payload, sizeof payload));
  auto words = capnp::messageToFlatArray(builder);
  std::vector<zmq::message_t> frames;
  frames.emplace_back(words.begin(), words.size() * sizeof(capnp::word));
  auto decoded = InMessage::Decode(std::move(frames), DecodeLimits{});
  ASSERT_FALSE(decoded.ok());
  EXPECT_TRUE(decoded.status().IsInvalidArgument()) << decoded.status();
}

TEST(MessageTest, RejectsEmptyAndNonWordEnvelope) {
  EXPECT_TRUE(InMessage::Decode({}, DecodeLimits{}).status().IsInvalidArgument());
  std::vector<zmq::message_t> f;
  f.emplace_back("abcde", 5);
  EXPECT_TRUE(InMessage::Decode(std::move(f), DecodeLimits{}).status().IsInvalidArgument());
}

TEST(MessageTest, RejectsTooManyFrames) {
  auto frames = Sample({1});
  for (size_t i = 0; i < DecodeLimits{}.max_bulk_frames + 1; ++i) frames.emplace_back(8);
  EXPECT_TRUE(InMessage::Decode(std::move(frames), DecodeLimits{}).status().IsInvalidArgument());
}

TEST(MessageTest, RejectsBulkFramesThatDisagreeWithDeclaredSizes) {
  auto frames = Sample({1, 2});
  frames.pop_back();  // declared one bulk frame, none present
  auto s = InMessage::Decode(std::move(frames), DecodeLimits{}).status();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("declares 1 bulk frames"), std::string::npos) << s;

  auto frames2 = Sample({1, 2});
  frames2[1] = zmq::message_t(8);  // 8 bytes where 16 were declared
  EXPECT_TRUE(InMessage::Decode(std::move(frames2), DecodeLimits{}).status().IsInvalidArgument());
}

TEST(MessageTest, RejectsTruncatedAndRandomEnvelopes) {
  auto frames = Sample({1});
  std::vector<zmq::message_t> cut;
  cut.emplace_back(frames[0].data(), frames[0].size() / 2 / 8 * 8);
  cut.push_back(std::move(frames[1]));
  EXPECT_FALSE(InMessage::Decode(std::move(cut), DecodeLimits{}).ok());

  std::mt19937_64 rng(7);
  int accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint64_t> words(1 + rng() % 16);
    for (auto& w : words) w = rng();
    std::vector<zmq::message_t> f;
    f.emplace_back(words.data(), words.size() * 8);
    auto d = InMessage::Decode(std::move(f), DecodeLimits{});
    if (d.ok()) {
      ++accepted;
      // Whatever was accepted must be fully readable without throwing.
      (void)d->envelope().getBody().which();
      (void)d->header().getBuildId();
    }
  }
  EXPECT_LT(accepted, 2000);
}

TEST(MessageTest, BulkAsRejectsSizeNotMultipleOfElement) {
  OutMessage m;
  m.envelope().initHeader();
  m.AddBulkCopy("abcdefghij", 10);
  auto d = InMessage::Decode(std::move(m).Finish(), DecodeLimits{});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->BulkAs<float>(0).status().IsInvalidArgument());
  EXPECT_TRUE(d->BulkAs<float>(1).status().IsInvalidArgument());
}

TEST(MessageTest, ReplyStatusMapsCodes) {
  OutMessage m;
  m.envelope().initHeader();
  m.envelope().setIsReply(true);
  m.envelope().initReply().setCode(ReplyCode::STALE);
  auto d = InMessage::Decode(std::move(m).Finish(), DecodeLimits{});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(ReplyStatus(*d).IsAborted());
}

}  // namespace
}  // namespace tandem::wire
