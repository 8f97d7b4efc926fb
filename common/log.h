// Process logging: one line per event on stderr, each carrying the process identity
// (role, index, incarnation, generation, step) so that interleaved logs of a cluster read clearly.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <string>

namespace tandem::log {

// Sets up the process logger. Called once by main(); the identity fields below are the one
// piece of process-wide mutable state we keep, because every log line in every module needs them
// and threading a logger through each call would obscure the code (STYLE rule zero).
void Init(const std::string& role_and_index, const std::string& level = "info");
void SetIncarnation(uint64_t incarnation);
void SetGeneration(uint64_t generation);
void SetStep(int64_t step);

}  // namespace tandem::log

#define TLOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define TLOG_INFO(...) spdlog::info(__VA_ARGS__)
#define TLOG_WARN(...) spdlog::warn(__VA_ARGS__)
#define TLOG_ERROR(...) spdlog::error(__VA_ARGS__)
