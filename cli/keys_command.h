// `tandem keys --out DIR`: the cluster's CURVE key material (DESIGN §7).
#pragma once

#include <string>

namespace tandem::cli {

struct KeysArgs {
  std::string out;
};

// Exit status: 0 written, 1 an I/O error or an existing key file (never replaced).
int RunKeys(const KeysArgs& args);

}  // namespace tandem::cli
