#include "server/ps/file_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/testing/test_util.h"

namespace tandem::ps {
namespace {

namespace fs = std::filesystem;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Sizes around the block (4 KiB) and the copy buffer (1 MiB): the copy is the source, byte for
// byte, with its size and CRC, whether it went direct or buffered.
TEST(FileIoTest, CopiesAreExactAtEverySizeAroundBlocksAndBuffers) {
  testing::TempDir dir;
  const bool direct = testing::CopiesGoDirect(dir.path());
  for (size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097},
                      size_t{1} << 20, (size_t{1} << 20) + 1, (size_t{3} << 20) + 5}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const std::string from = dir.path() + "/from", to = dir.path() + "/to";
    const std::string bytes = RandomBytes(size, static_cast<uint32_t>(size));
    WriteFile(from, bytes);
    StatusOr<int> fd = CreateForCopy(to);
    ASSERT_TRUE(fd.ok()) << fd.status();
    Fd out(*fd);
    EXPECT_EQ((::fcntl(out.get(), F_GETFL) & O_DIRECT) != 0, direct);
    StatusOr<FileSum> sum = StreamFile(from, out.get(), to);
    ASSERT_TRUE(sum.ok()) << sum.status();
    ASSERT_EQ(out.Close(), 0);
    EXPECT_EQ(sum->size_bytes, size);
    EXPECT_EQ(sum->crc32c, Crc32c(bytes.data(), bytes.size()));
    EXPECT_EQ(fs::file_size(to), size);
    EXPECT_TRUE(testing::ReadFile(to) == bytes);
  }
}

// A direct write the kernel cuts short goes on from the last whole block it wrote; one that
// writes less than a block makes no progress and is an error, not a loop.
TEST(FileIoTest, DirectWritesResumeAfterShortWritesAndRefuseNoProgress) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/out";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  Fd file(fd);
  AlignedBytes buf = AllocateAligned(4 * kDirectIoBlock);
  ASSERT_NE(buf, nullptr);
  const std::string bytes = RandomBytes(4 * kDirectIoBlock, 7);
  std::memcpy(buf.get(), bytes.data(), bytes.size());
  // Every call writes one block and a half, as a disk filling up might.
  int calls = 0;
  PwritevFn short_writes = [&](int f, const iovec* iov, int n, off_t offset) -> ssize_t {
    ++calls;
    const size_t len = std::min(iov[0].iov_len, kDirectIoBlock + kDirectIoBlock / 2);
    return ::pwrite(f, iov[0].iov_base, len, offset);
  };
  ASSERT_TRUE(WriteDirectAt(file.get(), buf.get(), bytes.size(), 0, path, short_writes).ok());
  EXPECT_EQ(calls, 4);  // 1.5 of 4 blocks, then 1.5 of 3, 1.5 of 2, and the last one whole
  EXPECT_TRUE(testing::ReadFile(path) == bytes);

  PwritevFn stuck = [](int f, const iovec* iov, int, off_t offset) -> ssize_t {
    return ::pwrite(f, iov[0].iov_base, 100, offset);
  };
  Status s = WriteDirectAt(file.get(), buf.get(), bytes.size(), 0, path, stuck);
  EXPECT_TRUE(s.IsUnavailable()) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;

  PwritevFn full = [](int, const iovec*, int, off_t) -> ssize_t {
    errno = ENOSPC;
    return -1;
  };
  s = WriteDirectAt(file.get(), buf.get(), bytes.size(), 0, path, full);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
}

}  // namespace
}  // namespace tandem::ps
