#include "worker/model/network_factory.h"

#include "worker/model/dcn_v2.h"
#include "worker/model/deepfm.h"
#include "worker/model/dlrm.h"
#include "worker/model/mmoe.h"
#include "worker/model/wide_deep.h"

namespace tandem::model {

StatusOr<std::unique_ptr<Network>> MakeNetwork(const config::ModelConfig& config,
                                               const ModelInputs& inputs) {
  if (config.type == "dlrm") return DlrmNetwork::Create(config, inputs);
  if (config.type == "dcn_v2") return DcnV2Network::Create(config, inputs);
  if (config.type == "deepfm") return DeepFmNetwork::Create(config, inputs);
  if (config.type == "wide_deep") return WideDeepNetwork::Create(config, inputs);
  if (config.type == "mmoe") return MmoeNetwork::Create(config, inputs);
  return Status::InvalidArgument("unknown model.type '" + config.type +
                                 "' (dlrm | dcn_v2 | deepfm | wide_deep | mmoe)");
}

namespace {
std::string Join(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}
}  // namespace

std::vector<std::string> IgnoredModelKeys(const config::ModelConfig& c) {
  const config::ModelConfig d;
  const std::string& type = c.type;
  std::vector<std::string> keys;
  if (type != "dlrm") keys.push_back("model.interaction=" + c.interaction);
  if (type != "dcn_v2") {
    if (c.dcn_cross_layers != d.dcn_cross_layers)
      keys.push_back("model.dcn.cross_layers=" + std::to_string(c.dcn_cross_layers));
    if (c.dcn_low_rank != d.dcn_low_rank)
      keys.push_back("model.dcn.low_rank=" + std::to_string(c.dcn_low_rank));
    if (c.dcn_structure != d.dcn_structure)
      keys.push_back("model.dcn.structure=" + c.dcn_structure);
  }
  if (type != "mmoe") {
    if (c.mmoe_num_experts != d.mmoe_num_experts)
      keys.push_back("model.mmoe.num_experts=" + std::to_string(c.mmoe_num_experts));
    if (c.mmoe_expert_mlp != d.mmoe_expert_mlp)
      keys.push_back("model.mmoe.expert_mlp=" + Join(c.mmoe_expert_mlp));
  }
  if (type != "deepfm" && type != "wide_deep" && c.wide_optimizer != d.wide_optimizer)
    keys.push_back("model.wide.optimizer=" + c.wide_optimizer);
  return keys;
}

}  // namespace tandem::model
