// `tandem datagen` and `tandem convert`: synthetic CTR data with a known best AUC, and Criteo
// TSV to the seekable binary format (DESIGN §2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::cli {

struct DatagenArgs {
  std::string format;  // criteo | binary
  int64_t rows = 100000;
  uint64_t seed = 1;
  std::string out;
  int64_t vocab = 100000;
  double zipf = 1.1;
  std::string stream = "train";  // train | eval: same teacher, disjoint records
};

struct ConvertArgs {
  std::vector<std::string> in;
  std::string out;
};

int RunDatagen(const DatagenArgs& args);
int RunConvert(const ConvertArgs& args);

}  // namespace tandem::cli
