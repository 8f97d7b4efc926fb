#include "server/ps/store_checksum.h"

#include <chrono>
#include <cstdio>

namespace tandem::ps {

Status AddStoreToChecksum(EmbeddingStore* store, ModelChecksum* sum, uint64_t* rows, bool scan,
                          const std::string& what) {
  const bool kept = store->checksum_known();
  ModelChecksum stored;
  uint64_t stored_rows = 0;
  if (kept) TANDEM_RETURN_IF_ERROR(store->Checksum(&stored, &stored_rows));
  if (kept && !scan) {
    sum->Merge(stored);
    if (rows != nullptr) *rows = stored_rows;
    return Status::Ok();
  }
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  // Only a scan that takes a while says so: a small one prints nothing, so that the output of
  // `tandem checksum` stays what scripts read (the sum on the first line).
  constexpr uint64_t kAnnounceRows = 1u << 20;
  if (kept && stored_rows >= kAnnounceRows)
    std::fprintf(stderr, "%s: scanning %llu rows\n", what.c_str(),
                 static_cast<unsigned long long>(stored_rows));
  ModelChecksum part;
  uint64_t n = 0;
  TANDEM_RETURN_IF_ERROR(store->ScanChecksum(&part, &n, nullptr, [&](uint64_t done) {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double rate = s > 0 ? done / s : 0;
    if (kept && rate > 0 && stored_rows > done) {
      std::fprintf(stderr, "%s: %llu of %llu rows, %.0f rows/s, about %.0f s left\n", what.c_str(),
                   static_cast<unsigned long long>(done),
                   static_cast<unsigned long long>(stored_rows), rate, (stored_rows - done) / rate);
    } else {
      std::fprintf(stderr, "%s: %llu rows, %.0f rows/s\n", what.c_str(),
                   static_cast<unsigned long long>(done), rate);
    }
  }));
  if (kept && (part != stored || n != stored_rows))
    return Status::DataLoss(what + ": the rows sum to " + part.Hex() + " (" + std::to_string(n) +
                            " rows), but the store's kept sum is " + stored.Hex() + " (" +
                            std::to_string(stored_rows) + " rows)");
  sum->Merge(part);
  if (rows != nullptr) *rows = n;
  return Status::Ok();
}

}  // namespace tandem::ps
