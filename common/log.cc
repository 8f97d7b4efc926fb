#include "common/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <memory>

namespace tandem::log {
namespace {

struct Identity {
  std::string who = "tandem";
  std::atomic<uint64_t> incarnation{0};
  std::atomic<uint64_t> generation{0};
  std::atomic<int64_t> step{-1};
};

Identity& Ident() {
  static Identity identity;
  return identity;
}

// Renders "ps:0 inc=1 gen=0 step=12" into every line (pattern flag %*).
class IdentityFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const Identity& id = Ident();
    fmt::format_to(std::back_inserter(dest), "{} inc={} gen={} step={}", id.who,
                   id.incarnation.load(), id.generation.load(), id.step.load());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<IdentityFlag>();
  }
};

}  // namespace

void Init(const std::string& role_and_index, const std::string& level) {
  Ident().who = role_and_index;
  // A second Init (a daemon's start-up run twice in one process, as its tests do) replaces the
  // logger; spdlog refuses a second one of the same name with an exception.
  spdlog::drop("tandem");
  auto logger = spdlog::stderr_logger_mt("tandem");
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<IdentityFlag>('*').set_pattern("%Y-%m-%dT%H:%M:%S.%e %L %* | %v");
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void SetIncarnation(uint64_t v) { Ident().incarnation = v; }
void SetGeneration(uint64_t v) { Ident().generation = v; }
void SetStep(int64_t v) { Ident().step = v; }

}  // namespace tandem::log
