#include "launcher/job/node_drain.h"

#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

#include "launcher/cluster/environment.h"
#include "launcher/error.h"
#include "launcher/local/command_within.h"
#include "launcher/local/posix_spawner.h"

namespace muster {

SlurmNodeState parse_scontrol_node(const std::string& line) {
  // "NodeName=node1 Arch=x86_64 ... State=IDLE+DRAIN ThreadsPerCore=1 ... Reason=muster: GPU1
  // ... [root@2026-11-25T19:00:00]": every field a word, except Reason, which runs to the end.
  SlurmNodeState out;
  const size_t state = line.find(" State=") != std::string::npos ? line.find(" State=") + 7
                       : line.rfind("State=", 0) == 0             ? 6
                                                                  : std::string::npos;
  if (state == std::string::npos)
    throw Error(ErrorKind::Runtime, "scontrol named no State for the node: " + line.substr(0, 200));
  out.state = line.substr(state, line.find(' ', state) - state);
  out.drain = out.state.find("DRAIN") != std::string::npos;
  if (const size_t reason = line.find(" Reason="); reason != std::string::npos) {
    out.reason = line.substr(reason + 8);
    while (!out.reason.empty() && (out.reason.back() == '\n' || out.reason.back() == ' ')) out.reason.pop_back();
    // Slurm appends who set the reason and when.
    if (const size_t by = out.reason.rfind(" ["); by != std::string::npos && out.reason.back() == ']')
      out.reason.resize(by);
  }
  return out;
}

namespace {

class Scontrol : public SlurmNodeControl {
 public:
  explicit Scontrol(std::chrono::milliseconds deadline) : deadline_(deadline) {}

  SlurmNodeState state_of(const std::string& node) override {
    return parse_scontrol_node(checked({"scontrol", "show", "node", node, "-o"}, node).out);
  }
  void drain(const std::string& node, const std::string& reason) override {
    checked({"scontrol", "update", "NodeName=" + node, "State=DRAIN", "Reason=" + reason}, node);
  }
  void resume(const std::string& node) override {
    checked({"scontrol", "update", "NodeName=" + node, "State=RESUME"}, node);
  }

 private:
  CommandOutput checked(const std::vector<std::string>& argv, const std::string& node) {
    return run_checked_within(argv, deadline_, node);
  }

  std::chrono::milliseconds deadline_;
};

bool is_musters(const std::string& reason) { return reason.rfind(kDrainReasonPrefix, 0) == 0; }

}  // namespace

std::unique_ptr<SlurmNodeControl> scontrol_node_control(std::chrono::milliseconds deadline) {
  if (!find_program("scontrol", Environment::current()))
    throw Error(ErrorKind::Usage, "--drain needs Slurm's scontrol on the PATH; run it where slurmd runs "
                                  "(as HealthCheckProgram, a prolog or an epilog)");
  return std::make_unique<Scontrol>(deadline);
}

std::string this_slurm_node() {
  if (const char* name = std::getenv("SLURMD_NODENAME"); name && *name) return name;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string name = host;
  return name.substr(0, name.find('.'));
}

DrainOutcome drain_or_resume(SlurmNodeControl& control, const std::string& node,
                             const std::optional<std::string>& failure, const std::optional<std::string>& unknown) {
  const SlurmNodeState now = control.state_of(node);
  if (now.drain && !is_musters(now.reason))
    return {DrainOutcome::Action::LeftAlone,
            fmt::format("{} stays drained as someone else left it: {}", node,
                        now.reason.empty() ? now.state : now.reason)};
  if (failure) {
    // Slurm keeps a reason of any length; sinfo -R shows its start: the first finding fits.
    std::string reason = kDrainReasonPrefix + *failure;
    if (reason.size() > 250) reason = reason.substr(0, 247) + "...";
    if (now.drain && now.reason == reason) return {DrainOutcome::Action::None, node + " stays drained: " + reason};
    control.drain(node, reason);
    return {DrainOutcome::Action::Drained, fmt::format("drained {}: {}", node, reason)};
  }
  if (!now.drain) return {DrainOutcome::Action::None, ""};
  if (unknown)
    return {DrainOutcome::Action::None,
            fmt::format("{} stays drained ({}): a check could not be made ({}); it is resumed once every "
                        "check passes", node, now.reason, *unknown)};
  control.resume(node);
  return {DrainOutcome::Action::Resumed, fmt::format("resumed {}, healthy again (drained for: {})", node, now.reason)};
}

}  // namespace muster
