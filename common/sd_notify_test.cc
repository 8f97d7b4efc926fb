// SdNotify: a datagram to $NOTIFY_SOCKET (a path or an abstract '@' name), nothing without it.
#include "common/sd_notify.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "common/testing/notify_listener.h"
#include "common/testing/test_util.h"

namespace tandem {
namespace {

using testing::NotifyListener;

TEST(SdNotifyTest, SendsToThePathOrAbstractNameOfNotifySocketAndNothingWithoutIt) {
  testing::TempDir dir;
  const std::string path = dir.File("notify");
  NotifyListener at_path(path);
  ASSERT_TRUE(at_path.bound());
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  EXPECT_TRUE(SdNotify("READY=1"));
  EXPECT_EQ(at_path.Receive(), "READY=1");

  const std::string abstract = "@tandem-sd-notify-test-" + std::to_string(::getpid());
  NotifyListener at_name(abstract);
  ASSERT_TRUE(at_name.bound());
  ::setenv("NOTIFY_SOCKET", abstract.c_str(), 1);
  EXPECT_TRUE(SdNotify("WATCHDOG=1"));
  EXPECT_EQ(at_name.Receive(), "WATCHDOG=1");

  ::setenv("NOTIFY_SOCKET", dir.File("nobody-listens").c_str(), 1);
  EXPECT_FALSE(SdNotify("READY=1"));
  ::unsetenv("NOTIFY_SOCKET");
  EXPECT_FALSE(SdNotify("READY=1"));
  EXPECT_EQ(at_path.Receive(std::chrono::milliseconds(200)), "") << "nothing more was sent";
}

}  // namespace
}  // namespace tandem
