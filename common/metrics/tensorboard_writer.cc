// Format, as TensorFlow's io::RecordWriter and EventsWriter write it:
//   record = u64 length | u32 masked_crc32c(length bytes) | data | u32 masked_crc32c(data),
//   integers little-endian, masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
//   data = tensorflow.Event: 1 wall_time (double), 2 step (int64), 3 file_version (string,
//   first record only, "brain.Event:2"), 5 summary (Summary: repeated 1 value (Value: 1 tag
//   string, 2 simple_value float)).
#include "common/metrics/tensorboard_writer.h"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "common/crc32c.h"

namespace tandem::metrics {
namespace {

// Protobuf keys: (field number << 3) | wire type.
constexpr uint8_t kEventWallTime = 0x09;     // field 1, fixed64
constexpr uint8_t kEventStep = 0x10;         // field 2, varint
constexpr uint8_t kEventFileVersion = 0x1a;  // field 3, length-delimited
constexpr uint8_t kEventSummary = 0x2a;      // field 5, length-delimited
constexpr uint8_t kSummaryValue = 0x0a;      // Summary field 1, length-delimited
constexpr uint8_t kValueTag = 0x0a;          // Value field 1, length-delimited
constexpr uint8_t kValueSimpleValue = 0x15;  // Value field 2, fixed32
constexpr std::string_view kFileVersion = "brain.Event:2";
constexpr int kMaxNameAttempts = 100;

uint32_t MaskedCrc(std::string_view bytes) {
  const uint32_t crc = Crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void PutFixed(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(value >> (8 * i)));
}

void PutVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void PutLengthDelimited(std::string* out, uint8_t key, std::string_view bytes) {
  out->push_back(static_cast<char>(key));
  PutVarint(out, bytes.size());
  out->append(bytes);
}

// Event fields 1 and 2. proto3 leaves a zero step out, as TensorFlow's own first record does.
std::string EventHeader(double wall_time, int64_t step) {
  std::string event;
  event.push_back(static_cast<char>(kEventWallTime));
  PutFixed(&event, std::bit_cast<uint64_t>(wall_time), 8);
  if (step != 0) {
    event.push_back(static_cast<char>(kEventStep));
    PutVarint(&event, static_cast<uint64_t>(step));  // negative: 10 bytes, as protobuf does
  }
  return event;
}

std::string SummaryValue(const Scalar& scalar) {
  std::string value;
  PutLengthDelimited(&value, kValueTag, scalar.tag);
  value.push_back(static_cast<char>(kValueSimpleValue));
  PutFixed(&value, std::bit_cast<uint32_t>(scalar.value), 4);
  return value;
}

std::string Record(std::string_view data) {
  std::string length;
  PutFixed(&length, data.size(), 8);
  std::string record = length;
  PutFixed(&record, MaskedCrc(length), 4);
  record.append(data);
  PutFixed(&record, MaskedCrc(data), 4);
  return record;
}

double SystemWallTime() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(now).count();
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// TensorFlow's EventsWriter name: "events.out.tfevents.%010lld.<host>".
std::string EventFileName(double wall_time, const std::string& host, int attempt) {
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%010" PRId64, static_cast<int64_t>(wall_time));
  std::string name = "events.out.tfevents." + std::string(stamp) + "." + host;
  if (attempt > 0) name += "." + std::to_string(attempt);
  return name;
}

StatusOr<internal::AppendFile> CreateEventFile(const std::string& dir, double wall_time,
                                               const std::string& host) {
  for (int attempt = 0; attempt < kMaxNameAttempts; ++attempt) {
    const std::string path = dir + "/" + EventFileName(wall_time, host, attempt);
    auto file = internal::AppendFile::Open(path, internal::AppendFile::Mode::kCreateNew);
    if (file.ok() || file.status().code() != StatusCode::kAlreadyExists) return file;
  }
  return Status::AlreadyExists("no free event file name in " + dir);
}

}  // namespace

StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& dir,
                                                                     TensorBoardOptions options) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return ErrnoToStatus(error.value(), "create directory " + dir);
  if (!options.wall_clock) options.wall_clock = SystemWallTime;
  if (options.hostname.empty()) options.hostname = HostName();
  // A '/' in the host name would put the file in another directory.
  for (char& c : options.hostname) c = c == '/' ? '_' : c;

  const double now = options.wall_clock();
  TANDEM_ASSIGN_OR_RETURN(internal::AppendFile file, CreateEventFile(dir, now, options.hostname));
  std::unique_ptr<TensorBoardWriter> writer(
      new TensorBoardWriter(std::move(file), std::move(options.wall_clock)));
  std::string event = EventHeader(now, 0);
  PutLengthDelimited(&event, kEventFileVersion, kFileVersion);
  {
    MutexLock lock(&writer->mu_);
    TANDEM_RETURN_IF_ERROR(writer->WriteEvent(event));
  }
  return writer;
}

Status TensorBoardWriter::WriteScalars(int64_t step, std::span<const Scalar> scalars) {
  std::string summary;
  for (const Scalar& scalar : scalars) {
    PutLengthDelimited(&summary, kSummaryValue, SummaryValue(scalar));
  }
  std::string event = EventHeader(wall_clock_(), step);
  PutLengthDelimited(&event, kEventSummary, summary);
  MutexLock lock(&mu_);
  return WriteEvent(event);
}

Status TensorBoardWriter::WriteScalar(int64_t step, std::string_view tag, float value) {
  const Scalar scalar{tag, value};
  return WriteScalars(step, std::span<const Scalar>(&scalar, 1));
}

Status TensorBoardWriter::WriteEvent(const std::string& event) {
  // One write per record: TensorBoard, tailing the file, never sees half a record for long.
  return file_.Append(Record(event));
}

Status TensorBoardWriter::WriteHeld() {
  MutexLock lock(&mu_);
  return file_.WriteHeld();
}

std::string TensorBoardWriter::Held() const {
  MutexLock lock(&mu_);
  return file_.Describe("events");
}

}  // namespace tandem::metrics
