// This node's healthy facts recorded as its own expectations, as NHC's nhc-genconf writes
// them: GPU count and model, the GPUs' PCIe generation and width, the active IB ports and
// their rate. Kept in the state directory (health_state_dir()); later runs check against it
// through the same comparisons as the cluster file's `expect:`.
#pragma once

#include <string>

#include "topology/health/health.h"

namespace muster {

// What record_node did.
struct RecordedNode {
  bool saved = false;
  std::string why_not;        // when not saved
  HealthExpectations record;  // what was recorded
};

// Checks the node as `sources` read it and, when no check fails, records its facts in
// `state_dir`, replacing an older record. A sick node is not recorded: its sickness would
// become what it is expected to be.
RecordedNode record_node(const HealthSources& sources, const std::string& state_dir);

// `expect` with the record in `state_dir` beneath it: what the cluster file sets wins, what
// it leaves unset the record gives. A record of another machine (/etc/machine-id under
// `root` differs) is not applied. `why_not` is set when a record is there but cannot be
// trusted (then `expect` alone).
HealthExpectations with_node_record(const HealthExpectations& expect, const std::string& root,
                                    const std::string& state_dir, std::string& why_not);

// check_node_health_within, judged against this node's record (beneath `expect`, as
// with_node_record merges it) and its counters' baseline, both in `state_dir`; a record that
// is there but cannot be trusted is a warning. What `muster health` and an agent asked by
// doctor both run.
NodeHealth check_node_against_its_record(const std::string& root, std::shared_ptr<GpuLibraries> gpus,
                                         const HealthExpectations& expect, std::chrono::milliseconds deadline,
                                         const std::string& why_no_gpu_libraries, const std::string& state_dir);

// One line of what a record expects: "8 GPUs NVIDIA H100 80GB HBM3 at Gen5 x16, 4 IB ports
// (mlx5_0 port 1, ...) at 400 Gb/s".
std::string node_record_text(const HealthExpectations& record);

}  // namespace muster
