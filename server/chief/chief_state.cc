#include "server/chief/chief_state.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/durable_file.h"

namespace tandem::chief {

std::string EncodeChiefState(const ChiefStateData& d) {
  nlohmann::json j = {{"term", d.term},
                      {"highest_incarnation", d.highest_incarnation},
                      {"generation", d.generation},
                      {"timeline", d.timeline},
                      {"latest_step", d.latest_step},
                      {"run_open", d.run_open},
                      {"run_resume_step", d.run_resume_step},
                      {"run_training_ms", d.run_training_ms},
                      {"run_ended_ms", d.run_ended_ms},
                      {"run_stop_reason", d.run_stop_reason},
                      // By name, "" before the end: people read this file.
                      {"run_end_state", d.run_end_state ? Name(*d.run_end_state) : ""},
                      {"run_result", d.run_result},
                      {"futile_runs", d.futile_runs}};
  return j.dump(2) + "\n";
}

StatusOr<ChiefStateData> DecodeChiefState(const std::string& text, const std::string& name) {
  ChiefStateData d;
  std::string end_state;
  try {
    auto j = nlohmann::json::parse(text);
    if (!j.is_object()) return Status::DataLoss(name + ": not a JSON object");
    auto u64 = [&](const char* key, uint64_t* out) -> Status {
      if (!j.contains(key) || !j[key].is_number_unsigned())
        return Status::DataLoss(name + ": '" + key + "' is missing or not an unsigned number");
      *out = j[key].get<uint64_t>();
      return Status::Ok();
    };
    TANDEM_RETURN_IF_ERROR(u64("term", &d.term));
    TANDEM_RETURN_IF_ERROR(u64("highest_incarnation", &d.highest_incarnation));
    TANDEM_RETURN_IF_ERROR(u64("generation", &d.generation));
    TANDEM_RETURN_IF_ERROR(u64("timeline", &d.timeline));
    if (!j.contains("latest_step") || !j["latest_step"].is_number_integer())
      return Status::DataLoss(name + ": 'latest_step' is missing or not an integer");
    d.latest_step = j["latest_step"].get<int64_t>();
    // The run's fields are optional: a state written by an older build has no run open.
    if (j.contains("run_open")) {
      if (!j["run_open"].is_boolean()) return Status::DataLoss(name + ": 'run_open' is not a bool");
      d.run_open = j["run_open"].get<bool>();
    }
    for (auto [key, out] :
         {std::pair{"run_resume_step", &d.run_resume_step},
          std::pair{"run_training_ms", &d.run_training_ms},
          std::pair{"run_ended_ms", &d.run_ended_ms}, std::pair{"futile_runs", &d.futile_runs}}) {
      if (!j.contains(key)) continue;
      if (!j[key].is_number_integer())
        return Status::DataLoss(name + ": '" + key + "' is not an integer");
      *out = j[key].get<int64_t>();
    }
    for (auto [key, out] :
         {std::pair{"run_stop_reason", &d.run_stop_reason}, std::pair{"run_end_state", &end_state},
          std::pair{"run_result", &d.run_result}}) {
      if (!j.contains(key)) continue;
      if (!j[key].is_string()) return Status::DataLoss(name + ": '" + key + "' is not a string");
      *out = j[key].get<std::string>();
    }
    if (!end_state.empty()) {
      d.run_end_state = ParseJobState(end_state);
      if (!d.run_end_state)
        return Status::DataLoss(name + ": 'run_end_state' \"" + end_state +
                                "\" is not a job state");
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::DataLoss(name + ": corrupt chief state: " + e.what());
  }
  if (d.generation == 0) return Status::DataLoss(name + ": generation 0 is never issued");
  return d;
}

StatusOr<std::unique_ptr<ChiefState>> ChiefState::Open(const std::string& checkpoint_dir) {
  const std::string dir = checkpoint_dir + "/chief";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
  std::unique_ptr<ChiefState> state(new ChiefState(dir + "/state"));
  ChiefStateData data;
  if (std::filesystem::exists(state->path_, ec)) {
    std::ifstream in(state->path_, std::ios::binary);
    if (!in) return Status::Unavailable("cannot read " + state->path_);
    std::stringstream text;
    text << in.rdbuf();
    TANDEM_ASSIGN_OR_RETURN(data, DecodeChiefState(text.str(), state->path_));
  } else if (ec) {
    return Status::Unavailable("cannot stat " + state->path_ + ": " + ec.message());
  }
  data.term += 1;
  TANDEM_RETURN_IF_ERROR(state->Save(data));
  return state;
}

Status ChiefState::Save(const ChiefStateData& data) {
  TANDEM_RETURN_IF_ERROR(WriteFileDurably(path_, EncodeChiefState(data)));
  data_ = data;
  return Status::Ok();
}

}  // namespace tandem::chief
