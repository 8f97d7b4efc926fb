// Messages on the wire: one Cap'n Proto Envelope frame followed by raw little-endian bulk
// frames (DESIGN §7). InMessage decodes and validates a received message; OutMessage builds one.
// Only common/wire/ and *_service.cc see the generated schema types.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "common/status.h"
#include "schemas/envelope.capnp.h"

namespace tandem::wire {

// Bounds applied to every received message before anything else reads it.
struct DecodeLimits {
  // Raw frames after the envelope. A push carries up to 3 per table (ids, gradients, a
  // reduced-precision copy), and a job has up to 4096 tables, twice that with wide companions
  // (issue 19): 64 dropped the pushes of any job with more than 32 tables.
  size_t max_bulk_frames = 3 * 8192 + 8;
  size_t max_envelope_bytes = 4u << 20;   // the Cap'n Proto frame
  uint64_t max_total_bytes = 1ull << 31;  // envelope + bulk
  int max_nesting = 16;
};

// A received, structurally validated message. Move-only; owns its frames.
// Requires external synchronization.
class InMessage {
 public:
  // `frames` = [envelope, bulk...] (a ROUTER's routing frame already removed). Checks the frame
  // count, sizes, alignment, the whole Cap'n Proto structure (so later field reads cannot throw)
  // and that the bulk frames match the declared `bulkSizes`. kInvalidArgument otherwise.
  static StatusOr<InMessage> Decode(std::vector<zmq::message_t> frames, const DecodeLimits& limits);

  InMessage(InMessage&&) = default;
  InMessage& operator=(InMessage&&) = default;

  Envelope::Reader envelope() const { return root_; }
  Header::Reader header() const { return root_.getHeader(); }
  uint64_t request_id() const { return root_.getHeader().getRequestId(); }
  bool is_reply() const { return root_.getIsReply(); }
  ReplyCode reply_code() const { return root_.getReply().getCode(); }

  size_t bulk_count() const { return frames_.size() - 1; }
  std::span<const std::byte> bulk(size_t i) const;
  // Frame i as an array of T (T trivially copyable). Copies into aligned storage when the frame
  // is misaligned (small zmq frames arrive at arbitrary offsets). kInvalidArgument when the size
  // is not a multiple of sizeof(T).
  template <typename T>
  StatusOr<std::span<const T>> BulkAs(size_t i);
  // Moves the bulk frames out (for echoing or forwarding without a copy).
  std::vector<zmq::message_t> TakeBulk();
  size_t total_bytes() const { return total_bytes_; }

 private:
  InMessage() = default;
  StatusOr<std::span<const std::byte>> AlignedBulk(size_t i, size_t alignment);

  std::vector<zmq::message_t> frames_;
  kj::Array<capnp::word> envelope_copy_;  // only when the envelope frame was misaligned
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
  Envelope::Reader root_;
  std::vector<std::unique_ptr<uint64_t[]>> bulk_copies_;
  size_t total_bytes_ = 0;
};

template <typename T>
StatusOr<std::span<const T>> InMessage::BulkAs(size_t i) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (i >= bulk_count()) return Status::InvalidArgument("missing bulk frame");
  if (frames_[i + 1].size() % sizeof(T) != 0)
    return Status::InvalidArgument("bulk frame size is not a multiple of the element size");
  auto bytes = AlignedBulk(i, alignof(T));
  if (!bytes.ok()) return bytes.status();
  return std::span<const T>(reinterpret_cast<const T*>(bytes->data()), bytes->size() / sizeof(T));
}

// A message under construction. Move-only. Requires external synchronization.
class OutMessage {
 public:
  OutMessage();
  OutMessage(OutMessage&&) = default;
  OutMessage& operator=(OutMessage&&) = default;

  Envelope::Builder envelope() { return root_; }
  // Appends a raw frame (no copy).
  void AddBulk(zmq::message_t frame);
  void AddBulkCopy(const void* data, size_t bytes);
  // Appends the vector's bytes without copying; the frame owns the vector.
  template <typename T>
  void AddBulkVector(std::vector<T> values);
  // Appends an array of `count` values without copying; the frame owns it. Unlike a vector it
  // need not be zero-filled first.
  template <typename T>
  void AddBulkArray(std::unique_ptr<T[]> values, size_t count);
  size_t bulk_count() const { return bulk_.size(); }

  // Serializes: fills `bulkSizes`, returns [envelope, bulk...]. Consumes the message.
  std::vector<zmq::message_t> Finish() &&;

 private:
  std::unique_ptr<capnp::MallocMessageBuilder> builder_;
  Envelope::Builder root_;
  std::vector<zmq::message_t> bulk_;
};

template <typename T>
void OutMessage::AddBulkVector(std::vector<T> values) {
  static_assert(std::is_trivially_copyable_v<T>);
  auto* owned = new std::vector<T>(std::move(values));  // freed by zmq when the frame is sent
  bulk_.emplace_back(
      owned->data(), owned->size() * sizeof(T),
      [](void*, void* hint) { delete static_cast<std::vector<T>*>(hint); }, owned);
}

template <typename T>
void OutMessage::AddBulkArray(std::unique_ptr<T[]> values, size_t count) {
  static_assert(std::is_trivially_copyable_v<T>);
  T* raw = values.release();  // freed by zmq when the frame is sent
  bulk_.emplace_back(
      raw, count * sizeof(T), [](void* data, void*) { delete[] static_cast<T*>(data); }, nullptr);
}

std::string_view ReplyCodeName(ReplyCode code);

// Maps a reply's code to a Status for callers that only need success/failure:
// STALE -> kAborted, RETRY/NOT_READY/OVERLOADED -> kUnavailable, WRONG_JOB -> kPermissionDenied,
// INVALID -> kInvalidArgument, UNIMPLEMENTED -> kUnimplemented, INTERNAL -> kInternal.
Status ReplyStatus(const InMessage& reply);

}  // namespace tandem::wire
