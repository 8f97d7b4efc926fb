// Every example job in configs/ must load: they are documentation that people copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/config/job_config.h"

namespace tandem::config {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> ExampleConfigs() {
  std::vector<fs::path> paths;
  std::error_code ec;
  for (const fs::directory_entry& e :
       fs::directory_iterator(fs::path(TANDEM_SOURCE_DIR) / "configs", ec)) {
    if (e.is_regular_file() && e.path().extension() == ".yaml") paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

TEST(ExampleConfigsTest, TheDocumentedExamplesExist) {
  std::vector<fs::path> paths = ExampleConfigs();
  for (const char* name : {"local.yaml", "two-hosts.yaml", "multi-hot.yaml", "dcn-v2.yaml",
                           "deepfm.yaml", "wide-deep.yaml", "mmoe.yaml"}) {
    EXPECT_TRUE(std::any_of(paths.begin(), paths.end(),
                            [&](const fs::path& p) { return p.filename() == name; }))
        << name << " missing from " << TANDEM_SOURCE_DIR << "/configs";
  }
}

TEST(ExampleConfigsTest, EveryExampleLoads) {
  for (const fs::path& path : ExampleConfigs()) {
    StatusOr<JobConfig> config = LoadJobConfig(path.string(), {});
    EXPECT_TRUE(config.ok()) << config.status();
    // What ToYaml prints must load again to the same config (it goes into checkpoint manifests).
    if (config.ok()) {
      StatusOr<JobConfig> again = ParseJobConfig(config->ToYaml(), path.string() + " (ToYaml)", {});
      EXPECT_TRUE(again.ok()) << again.status();
      if (again.ok()) {
        EXPECT_EQ(*again, *config) << path;
      }
    }
  }
}

TEST(ExampleConfigsTest, LocalJobIsSmallAndLocal) {
  StatusOr<JobConfig> c = LoadJobConfig(std::string(TANDEM_SOURCE_DIR) + "/configs/local.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.format, "synthetic");
  EXPECT_EQ(c->cluster.ps.size(), 2u);
  EXPECT_EQ(c->cluster.workers.size(), 2u);
  for (const auto* list : {&c->cluster.chief, &c->cluster.ps, &c->cluster.workers}) {
    for (const std::string& address : *list) EXPECT_EQ(address, "127.0.0.1:0");
  }
  EXPECT_EQ(c->train.steps, 2000);
  EXPECT_EQ(c->output.dir, "out/local");
}

TEST(ExampleConfigsTest, TwoHostsJobSplitsTasksOverTwoHosts) {
  StatusOr<JobConfig> c =
      LoadJobConfig(std::string(TANDEM_SOURCE_DIR) + "/configs/two-hosts.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cluster.chief, std::vector<std::string>{"10.0.0.1:7000"});
  EXPECT_EQ(c->cluster.ps, (std::vector<std::string>{"10.0.0.1:7001", "10.0.0.2:7002"}));
  EXPECT_EQ(c->cluster.workers, (std::vector<std::string>{"10.0.0.1:7003", "10.0.0.2:7004"}));
  EXPECT_EQ(c->data.format, "criteo");
  EXPECT_EQ(c->data.train, "/data/criteo/train/*.tsv");
}

}  // namespace
}  // namespace tandem::config
