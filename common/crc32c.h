// CRC-32C (Castagnoli), as used by RocksDB, ext4 and iSCSI: push-log records and checkpoint
// files are checked with it. Uses the SSE4.2 instruction when the CPU has it (chosen at run
// time: the build targets baseline x86-64), a table otherwise; both give the same value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem {

// CRC of data[0, n) continuing from `crc` (0 to start).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

namespace internal {
// The portable table-driven path, same contract as Crc32cExtend (exposed for tests).
uint32_t Crc32cExtendTable(uint32_t crc, const void* data, size_t n);
// Whether Crc32cExtend uses the SSE4.2 instruction on this CPU.
bool Crc32cHasHardware();
}  // namespace internal

}  // namespace tandem
