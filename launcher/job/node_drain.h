// `muster health --drain`: what LBNL NHC does for Slurm with a node's health. A sick node is
// drained with muster's one line of reason ("muster: ..."), which `sinfo -R` shows; a node
// muster drained is resumed once it is healthy again; a node someone else drained is never
// touched, nor is any other node. scontrol is the outside system, behind a seam.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace muster {

// A Slurm node as `scontrol show node NAME -o` tells it.
struct SlurmNodeState {
  std::string state;     // "IDLE+DRAIN", "MIXED", "DOWN+DRAIN"
  bool drain = false;    // the DRAIN flag is set (draining or drained)
  std::string reason;    // why, as written, without Slurm's "[user@time]"
};

// Parses one line of `scontrol show node NAME -o`. Throws Error(Runtime) when it names no
// State.
SlurmNodeState parse_scontrol_node(const std::string& line);

class SlurmNodeControl {
 public:
  virtual ~SlurmNodeControl() = default;
  // Each throws Error(Runtime) naming the node and what scontrol said when it fails.
  virtual SlurmNodeState state_of(const std::string& node) = 0;
  virtual void drain(const std::string& node, const std::string& reason) = 0;
  virtual void resume(const std::string& node) = 0;
};

// scontrol from the PATH, each call cut at `deadline` (a slurmctld that does not answer must
// not hold a health check past slurmd's own limit).
std::unique_ptr<SlurmNodeControl> scontrol_node_control(std::chrono::milliseconds deadline);

// This node's name in Slurm: SLURMD_NODENAME (set by slurmd for HealthCheckProgram, prologs
// and epilogs), else the short host name.
std::string this_slurm_node();

// Reasons muster writes start with this; only those are muster's to change or resume.
inline constexpr const char* kDrainReasonPrefix = "muster: ";

// What was done, in one line for the log ("drained node1: ...", "node1 stays drained: ...").
struct DrainOutcome {
  enum class Action { None, Drained, Resumed, LeftAlone } action = Action::None;
  std::string message;
};

// With `failure` (the first failed check, one line): drain `node` with it, or renew the
// reason of a drain of muster's. Without: resume a drain of muster's, unless a check could
// not be made (`unknown`, the first such, one line): what was not checked is not healthy, so
// the node stays drained until every check passes. A drain whose reason is not muster's is
// left as it is, whatever the health.
DrainOutcome drain_or_resume(SlurmNodeControl& control, const std::string& node,
                             const std::optional<std::string>& failure,
                             const std::optional<std::string>& unknown = std::nullopt);

}  // namespace muster
