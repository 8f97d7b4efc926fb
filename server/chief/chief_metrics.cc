#include "server/chief/chief_metrics.h"

#include <string>
#include <vector>

#include "server/chief/chief_service.h"

namespace tandem::chief {

using metrics::AddCount;
using metrics::AddGauge;
using Sample = metrics::Registry::Sample;

void AddChiefMetrics(metrics::Registry* registry, const ChiefService* chief) {
  registry->AddCollector([chief](std::vector<Sample>* out) {
    const JobSnapshot j = chief->Snapshot();
    AddGauge(out, "tandem_chief_term", "The chief's term", static_cast<double>(j.term));
    AddGauge(out, "tandem_generation", "The job's generation", static_cast<double>(j.generation));
    AddGauge(out, "tandem_timeline", "The job's timeline", static_cast<double>(j.timeline));
    AddGauge(out, "tandem_job_step", "The lowest step completed by every worker",
             static_cast<double>(j.step));
    AddGauge(out, "tandem_job_samples_per_second", "Training samples per second, all workers",
             j.samples_per_sec);
    AddGauge(out, "tandem_last_checkpoint_step", "The newest committed checkpoint",
             static_cast<double>(j.last_checkpoint_step));
    // "up" counts every member present, whatever it reported.
    for (MemberState state : {MemberState::kUp, MemberState::kLost, MemberState::kStarting}) {
      double n = 0;
      for (const auto& m : j.members)
        n += state == MemberState::kUp ? IsPresent(m.state) : m.state == state;
      AddGauge(out, "tandem_members", "PS and workers by state", n,
               {{"state", std::string(Name(state))}});
    }
  });
}

}  // namespace tandem::chief
