#include "offline/checkpoint_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/checkpoint_layout.h"
#include "common/embedding/table_spec.h"
#include "common/errno_status.h"
#include "server/ps/durable_copy.h"

namespace tandem::offline {

namespace fs = std::filesystem;

StatusOr<OpenedCheckpoint> OpenCheckpoint(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir + "/MANIFEST", ec)) {
    std::ifstream in(dir + "/MANIFEST", std::ios::binary);
    if (!in) return Status::Unavailable("cannot read " + dir + "/MANIFEST");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    TANDEM_ASSIGN_OR_RETURN(chief::Manifest m, chief::DecodeManifest(text, dir + "/MANIFEST"));
    return OpenedCheckpoint{fs::path(dir).lexically_normal().parent_path().string(), std::move(m)};
  }
  std::vector<std::string> warnings;
  auto m = chief::LoadLatest(dir, /*durable_only=*/false, &warnings);
  for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (!m.ok()) return m.status();
  return OpenedCheckpoint{dir, std::move(m).value()};
}

StatusOr<config::JobConfig> CheckpointJobConfig(const OpenedCheckpoint& ckpt) {
  const std::string name = ckpt.root + "/" + CheckpointDirName(ckpt.manifest.step) + "/MANIFEST";
  return config::ParseJobConfig(ckpt.manifest.config_yaml, name, {});
}

StatusOr<std::unique_ptr<ps::EmbeddingStore>> OpenCheckpointShard(const OpenedCheckpoint& ckpt,
                                                                  const chief::ManifestPart& part,
                                                                  const config::JobConfig& job,
                                                                  const std::string& scratch) {
  TANDEM_ASSIGN_OR_RETURN(ps::CheckpointPart cp, ps::CheckpointPartFromJson(part.detail));
  const std::string durable = ckpt.root + "/" + ShardDurableDir(cp.shard);
  const std::string staged = scratch + "/" + part.name + "-checkpoint";
  const std::string live = scratch + "/" + part.name + "-live";
  TANDEM_RETURN_IF_ERROR(ps::MaterializePart(durable, cp, staged));
  TANDEM_RETURN_IF_ERROR(ps::RebuildLiveDb(staged, live));
  ps::StoreOptions so;
  so.db_dir = live;
  so.tables = embedding::TableSpecsFromConfig(job);
  so.seed = job.train.seed;
  so.cache_bytes = 64ull << 20;
  return ps::EmbeddingStore::Open(so);
}

StatusOr<std::unique_ptr<ScratchDir>> ScratchDir::Create(const std::string& prefix) {
  std::string tmpl = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoToStatus(errno, "mkdtemp " + tmpl);
  return std::unique_ptr<ScratchDir>(new ScratchDir(tmpl));
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);  // best effort: a leftover lies in the temp directory
}

namespace {

// Appends every row of one shard's store to `tables` (embeddings only, unsorted).
Status AddShardRows(ps::EmbeddingStore* store, std::vector<worker::FrozenTable>* tables) {
  Status bad = Status::Ok();
  TANDEM_RETURN_IF_ERROR(store->ForEachRow([&](uint32_t table, uint64_t id, const uint8_t* bytes) {
    if (table >= tables->size()) {
      bad = Status::DataLoss("a row of table " + std::to_string(table) + ", which the job lacks");
      return;
    }
    worker::FrozenTable& t = (*tables)[table];
    const embedding::RowRef row{const_cast<uint8_t*>(bytes)};
    t.ids.push_back(id);
    t.values.insert(t.values.end(), row.embedding(), row.embedding() + t.dim);
  }));
  return bad;
}

}  // namespace

StatusOr<worker::FrozenModel> ReadCheckpointModel(const OpenedCheckpoint& ckpt, bool verify) {
  const chief::Manifest& m = ckpt.manifest;
  TANDEM_RETURN_IF_ERROR(chief::VerifyManifestFiles(ckpt.root, m, verify, nullptr));
  worker::FrozenModel model;
  TANDEM_ASSIGN_OR_RETURN(model.job, CheckpointJobConfig(ckpt));
  model.step = m.step;
  const auto specs = embedding::TableSpecsFromConfig(model.job);
  for (const auto& spec : specs) model.tables.push_back({spec.table_id, spec.dim, {}, {}});
  TANDEM_ASSIGN_OR_RETURN(auto scratch, ScratchDir::Create("tandem-checkpoint"));
  bool have_dense = false;
  for (const auto& part : m.parts) {
    if (part.name == "dense") {
      TANDEM_ASSIGN_OR_RETURN(worker::DenseState dense,
                              worker::ReadDenseState(ckpt.root + "/" + CheckpointDirName(m.step) +
                                                     "/" + kDenseCheckpointFile));
      if (dense.step != m.step)
        return Status::DataLoss("the dense file of checkpoint " + std::to_string(m.step) +
                                " is of step " + std::to_string(dense.step));
      model.dense = worker::WithoutOptimizerState(std::move(dense));
      have_dense = true;
      continue;
    }
    auto store = OpenCheckpointShard(ckpt, part, model.job, scratch->path());
    if (!store.ok()) return store.status().WithContext(part.name);
    TANDEM_RETURN_IF_ERROR(AddShardRows(store->get(), &model.tables).WithContext(part.name));
  }
  if (!have_dense)
    return Status::InvalidArgument("checkpoint " + std::to_string(m.step) + " has no dense part");
  for (auto& t : model.tables) TANDEM_RETURN_IF_ERROR(t.Finish());
  return model;
}

}  // namespace tandem::offline
