// The serving bundle's files: written whole or not at all, read back bit for bit, and refused
// (naming the file) when any byte of any file changed.
#include "offline/bundle.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/testing/test_util.h"

namespace tandem::offline {
namespace {

namespace fs = std::filesystem;
using ::tandem::testing::ReadFile;
using ::tandem::testing::TempDir;
using ::tandem::testing::WriteFile;

worker::FrozenModel SmallModel() {
  worker::FrozenModel m;
  auto job = config::ParseJobConfig(
      "data:\n  num_dense: 2\n  num_categorical: 3\nmodel:\n  embedding_dim: 2\n"
      "  bottom_mlp: [4, 2]\n  top_mlp: [4, 1]\ntrain:\n  seed: 5\n",
      "small.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  m.job = *job;
  m.step = 41;
  m.dense.step = 41;
  m.dense.optimizer = "adam";
  m.dense.tensors.push_back({"bottom_mlp.0.weight", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}, {}});
  for (uint32_t t = 0; t < 3; ++t) m.tables.push_back({t, 2, {}, {}});
  m.tables[0] = {0, 2, {3, 9, 1u << 31}, {0.5f, -1, 2, 3, 4, 5}};
  m.tables[2] = {2, 2, {7}, {1e-7f, -0.0f}};
  return m;
}

void FlipByte(const std::string& path, size_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x20);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

TEST(BundleTest, ReadsBackWhatWasWrittenAndLeavesNoTemporaryDirectory) {
  TempDir dir;
  const worker::FrozenModel m = SmallModel();
  ASSERT_TRUE(WriteBundle(m, {"00ff", "/ckpt"}, dir.File("bundle")).ok());
  auto back = ReadBundle(dir.File("bundle"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, 41);
  EXPECT_EQ(back->job, m.job);
  ASSERT_EQ(back->tables.size(), 3u);
  for (size_t t = 0; t < 3; ++t) {
    EXPECT_EQ(back->tables[t].table, m.tables[t].table);
    EXPECT_EQ(back->tables[t].ids, m.tables[t].ids);
    EXPECT_EQ(back->tables[t].values, m.tables[t].values);
  }
  ASSERT_EQ(back->dense.tensors.size(), 1u);
  EXPECT_EQ(back->dense.tensors[0].values, m.dense.tensors[0].values);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "bundle");
  }
  EXPECT_EQ(entries, 1);
}

TEST(BundleTest, ANonEmptyOutputDirectoryIsRefusedAndAnEmptyOneIsFilled) {
  TempDir dir;
  fs::create_directories(dir.File("taken"));
  WriteFile(dir.File("taken/notes.txt"), "mine");
  Status s = WriteBundle(SmallModel(), {}, dir.File("taken"));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s;
  EXPECT_EQ(ReadFile(dir.File("taken/notes.txt")), "mine");
  EXPECT_FALSE(fs::exists(dir.File("taken/MANIFEST.json")));
  WriteFile(dir.File("file"), "x");
  EXPECT_EQ(WriteBundle(SmallModel(), {}, dir.File("file")).code(), StatusCode::kAlreadyExists);
  fs::create_directories(dir.File("empty"));
  ASSERT_TRUE(WriteBundle(SmallModel(), {}, dir.File("empty")).ok());
  EXPECT_TRUE(ReadBundle(dir.File("empty")).ok());
}

TEST(BundleTest, AChangedByteInAnyFileIsRefusedNamingTheFile) {
  TempDir dir;
  ASSERT_TRUE(WriteBundle(SmallModel(), {}, dir.File("good")).ok());
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir.File("good")))
    if (e.is_regular_file()) files.push_back(fs::relative(e.path(), dir.File("good")).string());
  ASSERT_EQ(files.size(), 6u);  // manifest, config, dense, 3 tables
  for (size_t k = 0; k < files.size(); ++k) {
    const std::string copy = dir.File("copy" + std::to_string(k));
    fs::copy(dir.File("good"), copy, fs::copy_options::recursive);
    FlipByte(copy + "/" + files[k], fs::file_size(copy + "/" + files[k]) / 2);
    auto r = ReadBundle(copy);
    ASSERT_FALSE(r.ok()) << files[k];
    EXPECT_TRUE(r.status().IsDataLoss()) << r.status();
    EXPECT_NE(r.status().message().find(files[k]), std::string::npos) << r.status();
  }
  fs::remove(dir.File("good/tables/C2.emb"));
  auto r = ReadBundle(dir.File("good"));
  EXPECT_TRUE(r.status().IsDataLoss()) << r.status();
  EXPECT_NE(r.status().message().find("C2.emb is missing"), std::string::npos) << r.status();
  EXPECT_TRUE(ReadBundle(dir.path()).status().IsNotFound());
}

TEST(BundleTest, TableFileRoundTripsAndATruncatedOneIsDataLoss) {
  const worker::FrozenTable t{4, 3, {1, 5}, {1, 2, 3, 4, 5, 6}};
  const std::string bytes = EncodeTableFile(t);
  EXPECT_EQ(bytes.size(), 32u + 2 * 8 + 6 * 4);
  auto back = DecodeTableFile(bytes, "t.emb");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->table, 4u);
  EXPECT_EQ(back->ids, t.ids);
  EXPECT_EQ(back->values, t.values);
  EXPECT_TRUE(DecodeTableFile(bytes.substr(0, bytes.size() - 4), "t.emb").status().IsDataLoss());
  const worker::FrozenTable unsorted{4, 3, {5, 1}, {1, 2, 3, 4, 5, 6}};
  EXPECT_TRUE(DecodeTableFile(EncodeTableFile(unsorted), "t.emb").status().IsDataLoss());
}

}  // namespace
}  // namespace tandem::offline
