#include "common/wire/message.h"

#include <capnp/dynamic.h>
#include <kj/exception.h>

#include <cstring>
#include <string>

namespace tandem::wire {

namespace {

bool IsPointer(capnp::schema::Type::Which type) {
  switch (type) {
    case capnp::schema::Type::TEXT:
    case capnp::schema::Type::DATA:
    case capnp::schema::Type::LIST:
    case capnp::schema::Type::STRUCT:
      return true;
    default:
      return false;
  }
}

// From the field's proto: StructSchema::Field::getType() would resolve brands each time, and
// cost more than the rest of Decode.
bool IsPointer(capnp::StructSchema::Field field) {
  auto proto = field.getProto();
  return proto.isGroup() || IsPointer(proto.getSlot().getType().which());
}

// Reads every pointer field that is set, as this process's schema sees it. totalSize() checks
// only the bounds of pointers; a pointer's element type (a list of bytes where a List(UInt64) is
// declared, a list where a struct is) and a text's NUL are checked when the field is read, so
// they are read once here, inside Decode's try. Primitive and enum fields are not visited: they
// sit in bounds-checked data and cannot throw. Recursion is bounded by ReaderOptions'
// nestingLimit.
void ReadPointers(capnp::DynamicValue::Reader v) {
  switch (v.getType()) {
    case capnp::DynamicValue::LIST: {
      auto list = v.as<capnp::DynamicList>();  // the element type is checked here
      if (!IsPointer(list.getSchema().getElementType().which())) break;
      for (auto e : list) ReadPointers(e);
      break;
    }
    case capnp::DynamicValue::STRUCT: {
      // The union's active member only: looking at every member's type would cost more than
      // the rest of Decode (Envelope's body has dozens). get() reads (and checks) the pointer.
      auto s = v.as<capnp::DynamicStruct>();
      auto visit = [&](capnp::StructSchema::Field field) {
        if (IsPointer(field) && s.has(field)) ReadPointers(s.get(field));
      };
      for (auto field : s.getSchema().getNonUnionFields()) visit(field);
      KJ_IF_MAYBE (active, s.which()) {
        visit(*active);
      }
      break;
    }
    default:
      break;  // TEXT and DATA: checked by get()
  }
}

}  // namespace

StatusOr<InMessage> InMessage::Decode(std::vector<zmq::message_t> frames,
                                      const DecodeLimits& limits) {
  if (frames.empty()) return Status::InvalidArgument("empty message");
  if (frames.size() - 1 > limits.max_bulk_frames)
    return Status::InvalidArgument("too many bulk frames: " + std::to_string(frames.size() - 1));
  const size_t env_bytes = frames[0].size();
  if (env_bytes == 0 || env_bytes % sizeof(capnp::word) != 0)
    return Status::InvalidArgument("envelope size " + std::to_string(env_bytes) +
                                   " is not a whole number of words");
  if (env_bytes > limits.max_envelope_bytes)
    return Status::InvalidArgument("envelope too large: " + std::to_string(env_bytes));
  uint64_t total = 0;
  for (const auto& f : frames) total += f.size();
  if (total > limits.max_total_bytes) return Status::InvalidArgument("message too large");

  InMessage m;
  m.total_bytes_ = total;
  m.frames_ = std::move(frames);
  kj::ArrayPtr<const capnp::word> words;
  const void* data = m.frames_[0].data();
  const size_t n_words = env_bytes / sizeof(capnp::word);
  if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) == 0) {
    words = {static_cast<const capnp::word*>(data), n_words};
  } else {
    // Frames under ~8 KiB sit at arbitrary offsets inside libzmq's receive buffer.
    m.envelope_copy_ = kj::heapArray<capnp::word>(n_words);
    std::memcpy(m.envelope_copy_.begin(), data, env_bytes);
    words = m.envelope_copy_.asPtr();
  }
  try {
    capnp::ReaderOptions options;
    options.nestingLimit = limits.max_nesting;
    {
      // One checked pass, under a traversal limit that bounds what a pass costs (pointers may
      // share targets, so a message can amplify its size): the bounds of every pointer
      // (totalSize), then their types and texts, which capnp checks only on read.
      options.traversalLimitInWords = n_words * 8 + 1024;
      capnp::FlatArrayMessageReader check(words, options);
      auto root = check.getRoot<Envelope>();
      root.totalSize();
      ReadPointers(capnp::toDynamic(root));
    }
    // The limit is cumulative per reader, and handlers read parts again (each list getter
    // counts). Every such read costs at most what the checked pass read, so the reader kept
    // has no limit: no later field read can throw.
    options.traversalLimitInWords = kj::maxValue;
    m.reader_ = std::make_unique<capnp::FlatArrayMessageReader>(words, options);
    m.root_ = m.reader_->getRoot<Envelope>();
    auto sizes = m.root_.getBulkSizes();
    if (sizes.size() != m.frames_.size() - 1)
      return Status::InvalidArgument("envelope declares " + std::to_string(sizes.size()) +
                                     " bulk frames, message has " +
                                     std::to_string(m.frames_.size() - 1));
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] != m.frames_[i + 1].size())
        return Status::InvalidArgument("bulk frame " + std::to_string(i) + " declared " +
                                       std::to_string(sizes[i]) + " bytes, has " +
                                       std::to_string(m.frames_[i + 1].size()));
    }
    m.bulk_copies_.resize(m.frames_.size() - 1);
  } catch (const kj::Exception& e) {
    return Status::InvalidArgument(std::string("malformed envelope: ") + e.getDescription().cStr());
  }
  return m;
}

std::span<const std::byte> InMessage::bulk(size_t i) const {
  const auto& f = frames_.at(i + 1);
  return {static_cast<const std::byte*>(f.data()), f.size()};
}

StatusOr<std::span<const std::byte>> InMessage::AlignedBulk(size_t i, size_t alignment) {
  const auto& f = frames_[i + 1];
  if (reinterpret_cast<uintptr_t>(f.data()) % alignment == 0 || f.size() == 0)
    return std::span<const std::byte>(static_cast<const std::byte*>(f.data()), f.size());
  if (!bulk_copies_[i]) {
    bulk_copies_[i] = std::make_unique<uint64_t[]>((f.size() + 7) / 8);
    std::memcpy(bulk_copies_[i].get(), f.data(), f.size());
  }
  return std::span<const std::byte>(reinterpret_cast<const std::byte*>(bulk_copies_[i].get()),
                                    f.size());
}

std::vector<zmq::message_t> InMessage::TakeBulk() {
  std::vector<zmq::message_t> out;
  for (size_t i = 1; i < frames_.size(); ++i) out.push_back(std::move(frames_[i]));
  frames_.resize(1);
  bulk_copies_.clear();
  return out;
}

OutMessage::OutMessage()
    : builder_(std::make_unique<capnp::MallocMessageBuilder>()),
      root_(builder_->initRoot<Envelope>()) {}

void OutMessage::AddBulk(zmq::message_t frame) { bulk_.push_back(std::move(frame)); }

void OutMessage::AddBulkCopy(const void* data, size_t bytes) { bulk_.emplace_back(data, bytes); }

std::vector<zmq::message_t> OutMessage::Finish() && {
  auto sizes = root_.initBulkSizes(static_cast<unsigned>(bulk_.size()));
  for (size_t i = 0; i < bulk_.size(); ++i) sizes.set(static_cast<unsigned>(i), bulk_[i].size());
  // Flatten once into a heap array that the zmq frame then owns: no second copy.
  auto* flat = new kj::Array<capnp::word>(capnp::messageToFlatArray(*builder_));
  std::vector<zmq::message_t> frames;
  frames.reserve(bulk_.size() + 1);
  frames.emplace_back(
      flat->begin(), flat->size() * sizeof(capnp::word),
      [](void*, void* hint) { delete static_cast<kj::Array<capnp::word>*>(hint); }, flat);
  for (auto& b : bulk_) frames.push_back(std::move(b));
  bulk_.clear();
  return frames;
}

std::string_view ReplyCodeName(ReplyCode code) {
  switch (code) {
    case ReplyCode::OK:
      return "OK";
    case ReplyCode::STALE:
      return "STALE";
    case ReplyCode::RETRY:
      return "RETRY";
    case ReplyCode::NOT_READY:
      return "NOT_READY";
    case ReplyCode::WRONG_JOB:
      return "WRONG_JOB";
    case ReplyCode::INVALID:
      return "INVALID";
    case ReplyCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case ReplyCode::OVERLOADED:
      return "OVERLOADED";
    case ReplyCode::INTERNAL:
      return "INTERNAL";
  }
  return "UNKNOWN_REPLY_CODE";
}

Status ReplyStatus(const InMessage& reply) {
  auto r = reply.envelope().getReply();
  std::string msg = std::string(ReplyCodeName(r.getCode())) + ": " + r.getMessage().cStr();
  switch (r.getCode()) {
    case ReplyCode::OK:
      return Status::Ok();
    case ReplyCode::STALE:
      return Status::Aborted(msg);
    case ReplyCode::RETRY:
    case ReplyCode::NOT_READY:
    case ReplyCode::OVERLOADED:
      return Status::Unavailable(msg);
    case ReplyCode::WRONG_JOB:
      return Status::PermissionDenied(msg);
    case ReplyCode::INVALID:
      return Status::InvalidArgument(msg);
    case ReplyCode::UNIMPLEMENTED:
      return Status::Unimplemented(msg);
    case ReplyCode::INTERNAL:
      return Status::Internal(msg);
  }
  return Status::Unknown(msg);
}

}  // namespace tandem::wire
