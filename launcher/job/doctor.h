// `muster doctor`: every stage in order (cluster, ssh, topology, health, network, launch, smoke),
// over one session, each check pass / warn / fail / skip with a one-line reason; a stage in
// which nothing passed skips only the stages that need it. The CI health check.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/cluster/cluster_input.h"
#include "launcher/job/cluster_context.h"
#include "launcher/job/cluster_ping.h"
#include "probes/culprit_search.h"
#include "topology/health/health.h"

namespace muster {

enum class CheckStatus { Pass, Warn, Fail, Skip };

const char* status_name(CheckStatus s);  // "pass", "warn", "fail", "skip"

// One check of one stage, for the whole cluster or one node.
struct Check {
  std::string stage;
  std::string name;
  std::optional<std::string> node;
  CheckStatus status = CheckStatus::Pass;
  std::string reason;  // one line
  // What it measured, in base units named in the key as Prometheus names them
  // ("rtt_median_seconds", "busbw_bytes_per_second"), for monitoring to graph.
  std::map<std::string, double> values;
  // A health check's finding in full: the device, what was seen and expected, and the remedy.
  std::optional<HealthFinding> health;
};

struct StageResult {
  std::string name;
  CheckStatus status = CheckStatus::Pass;  // the worst of its checks, or Skip
  std::string reason;
  double seconds = 0;
};

// A kind of node as its GPU paths show it: the hosts that share one model and path matrix.
struct NodeType {
  std::vector<std::string> hosts;
  std::vector<std::string> gpu_models;
  PathMatrix paths;
};

struct DoctorReport {
  std::string cluster;       // the cluster's name or source
  std::vector<StageResult> stages;
  std::vector<Check> checks;
  // What the stages measured, for reports that draw it: the network stage's pairs (and the
  // pair search's, past 16 nodes), and the nodes grouped by their GPU paths.
  std::optional<PingReport> network;
  std::optional<CulpritReport> pair_search;
  std::vector<NodeType> node_types;
  double seconds = 0;
  bool config_error = false; // the cluster description was invalid (exit 2)
  // Fail if any check failed; Warn if any warned; else Pass.
  CheckStatus overall() const;
};

struct DoctorRequest {
  ClusterInput cluster;
  RemoteSettings remote;
  std::vector<std::string> only, skip;  // stage names
  std::shared_ptr<SshTransport> transport;  // how nodes are reached: libssh's unless a test's
  // How long the nodes have to answer for their health: their checks take well under a
  // second; a hung NVML or file system costs this, no more.
  std::chrono::milliseconds health_limit{20000};
  // The GPU stress tests in the health stage whatever the cluster file's checks.stress says
  // (their 8 s budget is within the agents' 15 s and this limit).
  bool stress = false;
};

// What doctor tells as it goes, for a progress display.
class DoctorObserver {
 public:
  virtual ~DoctorObserver() = default;
  // `total` steps of `unit` ("nodes", "pairs"); 0 when the stage cannot count its steps.
  virtual void begin_stage(const std::string& name, int total, const std::string& unit) = 0;
  virtual void step_done() = 0;  // from any thread
  virtual void end_stage(const std::string& name, CheckStatus status, const std::string& reason) = 0;
  // A line a probe rank printed that is not part of the test (a library's warning).
  virtual void other_line(int rank, std::string_view text) { (void)rank, (void)text; }
};

// The stage names, in order.
const std::vector<std::string>& doctor_stages();

// A health finding as a check of stage "health": unknown is a warning (what could not be
// checked is never a pass), absent a skip.
Check health_check_of(const HealthFinding& finding, std::optional<std::string> node);

// `muster health`: this node's checks alone, as one "health" stage, cut at `deadline`:
// reading under `snapshot` (a node's files copied elsewhere: this machine's NVML is not
// asked), or when it is empty, this node as its agent reads it. `cluster` gives the
// expectations (its `expect:`, and its checks.stress*); its nodes are not reached. `stress`:
// the GPU stress tests run whatever the file says.
DoctorReport run_node_health(const ClusterInput& cluster, const std::string& snapshot,
                             std::chrono::milliseconds deadline, bool stress = false);

// Runs every selected stage. Throws Error(Usage) for an unknown stage name in only/skip;
// everything else, an invalid cluster file included, is reported as checks.
DoctorReport run_doctor(const DoctorRequest& request, DoctorObserver& observer);

}  // namespace muster
