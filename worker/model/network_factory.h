// model.type -> Network (issue 19). Adding a model is a Network subclass in its own file and
// one case here; nothing else in the worker changes.
//
// DeepFM and Wide & Deep also need a first-order term per field: the config gives every table
// a wide companion table (config::HasWideTables, config::TableNames), and the trainer appends
// one wide feature per field that looks the field's ids up in it (ModelInputs::num_wide).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/model/network.h"

namespace tandem::model {

StatusOr<std::unique_ptr<Network>> MakeNetwork(const config::ModelConfig& config,
                                               const ModelInputs& inputs);

// The model.* keys that model.type does not read, with their values ("model.interaction=dot"),
// for one log line: they are ignored, not refused, so that `--set model.type=...` works on any
// config. Keys of other models are listed only where they differ from their defaults.
std::vector<std::string> IgnoredModelKeys(const config::ModelConfig& config);

}  // namespace tandem::model
