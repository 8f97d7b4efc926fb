// `tandem datagen` and `tandem convert`: synthetic CTR data with a known best AUC, and Criteo
// TSV or the general text format to the seekable binary format (DESIGN §2). Given a job config
// (--config), both use its schema (features, labels) and its data.text.* layout, so multi-hot,
// weighted and multi-label data round-trips text -> binary version 2 -> training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::cli {

struct DatagenArgs {
  std::string format;  // criteo | binary | text
  int64_t rows = 100000;
  uint64_t seed = 1;
  std::string out;
  int64_t vocab = 100000;
  double zipf = 1.1;
  std::string stream = "train";  // train | eval: same teacher, disjoint records
  // A job config: its features, labels and data.text.* shape the data; its data.synthetic.vocab
  // and zipf apply unless --vocab / --zipf were given.
  std::string config_path;
  std::vector<std::string> sets;
  bool vocab_given = false;
  bool zipf_given = false;
};

struct ConvertArgs {
  std::vector<std::string> in;
  std::string out;
  // A job config giving the schema and the text layout; without it the input is Criteo TSV of
  // the default schema, as before.
  std::string config_path;
  std::vector<std::string> sets;
  // criteo | text; empty: text when the config's data.format is text or its schema is not
  // Criteo-shaped (Criteo lines cannot hold it), else criteo.
  std::string from;
};

int RunDatagen(const DatagenArgs& args);
int RunConvert(const ConvertArgs& args);

}  // namespace tandem::cli
