#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/testing/test_util.h"
#include "worker/collective/collective.h"

namespace tandem::collective {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::unique_ptr<FileStore> OpenStore(const testing::TempDir& tmp) {
  auto store = FileStore::Open(tmp.File("store"));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

TEST(FileStoreTest, SetThenGetReturnsTheBytes) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  ASSERT_NE(store, nullptr);
  const std::string value("a\0b\xff/c", 6);  // arbitrary bytes, NUL included
  ASSERT_TRUE(store->Set("gen-1/0", value).ok());
  auto got = store->Get("gen-1/0");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
}

TEST(FileStoreTest, SetReplacesAWholeValue) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Set("k", std::string(10000, 'x')).ok());
  ASSERT_TRUE(store->Set("k", "short").ok());
  auto got = store->Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "short");
}

TEST(FileStoreTest, GetOfAMissingKeyIsNotFound) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Set("present", "v").ok());
  EXPECT_TRUE(store->Get("absent").status().IsNotFound());
  EXPECT_TRUE(store->Get("present/").status().IsNotFound());
}

TEST(FileStoreTest, TwoStoresOnOneDirectoryShareKeys) {
  testing::TempDir tmp;
  auto a = OpenStore(tmp);
  auto b = OpenStore(tmp);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a->Set("x", "1").ok());
  auto got = b->Get("x");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "1");
}

TEST(FileStoreTest, WaitReturnsOnceAnotherThreadSetsTheKeys) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  ASSERT_NE(store, nullptr);
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(store->Set("a", "1").ok());
    ASSERT_TRUE(store->Set("b", "2").ok());
  });
  const auto start = Clock::now();
  Status s = store->Wait({"a", "b"}, milliseconds(5000));
  const auto waited = Clock::now() - start;
  setter.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_GE(waited, milliseconds(40));
  EXPECT_LT(waited, milliseconds(2000));
}

TEST(FileStoreTest, WaitTimesOutWhenAKeyNeverArrives) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Set("a", "1").ok());
  const auto start = Clock::now();
  Status s = store->Wait({"a", "never"}, milliseconds(150));
  const auto waited = Clock::now() - start;
  EXPECT_TRUE(s.IsDeadlineExceeded()) << s;
  EXPECT_GE(waited, milliseconds(150));
  EXPECT_LT(waited, milliseconds(1500));
}

}  // namespace
}  // namespace tandem::collective
