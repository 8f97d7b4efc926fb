#include "server/ps/rocks_info_log.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <memory>
#include <string>

#include "common/testing/test_util.h"

namespace tandem::ps {
namespace {

using testing::ReadFile;
using testing::TempDir;

TEST(InfoLogFileTest, WritesLinesAndKeepsOneOldLogAcrossOpens) {
  TempDir dir;
  {
    auto log = std::make_shared<InfoLogFile>(dir.path());
    rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, log, "first open, line %d", 1);
    rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL, log, "a warning");
  }
  EXPECT_NE(ReadFile(dir.File("LOG")).find("first open, line 1\n"), std::string::npos);
  EXPECT_NE(ReadFile(dir.File("LOG")).find("[WARN] a warning\n"), std::string::npos);
  {
    auto log = std::make_shared<InfoLogFile>(dir.path());
    rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, log, "second open");
    EXPECT_EQ(log->dropped_lines(), 0u);
  }
  EXPECT_EQ(ReadFile(dir.File("LOG")).find("first open"), std::string::npos);
  EXPECT_NE(ReadFile(dir.File("LOG")).find("second open\n"), std::string::npos);
  EXPECT_NE(ReadFile(dir.File("LOG.old")).find("first open, line 1\n"), std::string::npos);
}

TEST(InfoLogFileTest, StaysWithinTwiceItsBound) {
  TempDir dir;
  auto log = std::make_shared<InfoLogFile>(dir.path(), /*max_bytes=*/4096);
  const std::string text(100, 'x');
  for (int i = 0; i < 1000; ++i)
    rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, log, "%d %s", i, text.c_str());
  EXPECT_LT(std::filesystem::file_size(dir.File("LOG")), 4096u + 200u);
  EXPECT_LT(std::filesystem::file_size(dir.File("LOG.old")), 4096u + 200u);
  EXPECT_NE(ReadFile(dir.File("LOG")).find("999 " + text + "\n"), std::string::npos);
  EXPECT_EQ(log->dropped_lines(), 0u);
}

// A disk that stops taking bytes (the file-size limit, as ENOSPC would): a live RocksDB keeps
// logging, its flush fails, and nothing aborts. With RocksDB's own EnvLogger, the first line after
// a failed one hit Debian librocksdb's assertion in WritableFileWriter and aborted the process.
TEST(InfoLogFileTest, ADiskThatRefusesLinesDropsThemAndTheDbLivesOn) {
  TempDir dir;
  auto log = std::make_shared<InfoLogFile>(dir.path() + "/db");
  rocksdb::Options options;
  options.create_if_missing = true;
  options.info_log = log;
  rocksdb::DB* raw = nullptr;
  std::filesystem::create_directories(dir.path() + "/db");
  ASSERT_TRUE(rocksdb::DB::Open(options, dir.path() + "/db", &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "key", std::string(1 << 20, 'v')).ok());

  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  ::signal(SIGXFSZ, SIG_IGN);
  const rlimit full{1024, before.rlim_max};  // every file here is larger: none grows
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &full), 0);
  rocksdb::Status flushed = db->Flush(rocksdb::FlushOptions());
  for (int i = 0; i < 5; ++i)
    rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, log, "after the disk filled %d", i);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before), 0);

  EXPECT_FALSE(flushed.ok()) << "the flush's SST was written past the file-size limit";
  EXPECT_GE(log->dropped_lines(), 5u);
  const uint64_t dropped = log->dropped_lines();
  rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, log, "space is back");
  EXPECT_EQ(log->dropped_lines(), dropped);
  EXPECT_NE(ReadFile(dir.File("db/LOG")).find("space is back\n"), std::string::npos);
  EXPECT_EQ(ReadFile(dir.File("db/LOG")).find("after the disk filled"), std::string::npos);
  db.reset();  // closing logs too
}

}  // namespace
}  // namespace tandem::ps
