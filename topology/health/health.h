// Node health, as DCGM, LBNL NHC and Azure's health checks judge it: each check a small
// function from what it read (files under a root directory in the kernel's own formats,
// NVML's answers) to findings that name the device, what was seen, what was expected and
// where that expectation came from, and what to do. What could not be read is a finding too
// (unknown), never a pass. Nothing here prints or touches the network.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "topology/health/gpu_management.h"

namespace muster {

// Pass: checked and healthy. Warn: worth a look, not a reason to drain the node. Fail: sick.
// Unknown: could not be checked (a file missing or unreadable, a library that did not
// answer). Absent: nothing of the kind on this node (no GPU, no HCA).
enum class HealthStatus { Pass, Warn, Fail, Unknown, Absent };

const char* health_status_name(HealthStatus s);  // "pass", "warn", "fail", "unknown", "absent"

struct HealthFinding {
  std::string check;          // "pcie_link", "ib_port", "gpu_ecc", "xid", "software", ...
  HealthStatus status = HealthStatus::Pass;
  std::string device;         // "GPU1 0000:2a:00.0 NVIDIA H100", "mlx5_0 port 1"; "" for the node
  std::string observed;       // "x8 at 32.0 GT/s"
  std::string expected;       // "x16 at 32.0 GT/s"; "" when nothing was compared
  std::string expected_from;  // "the link's maximum", "expect.pcie_width", "most nodes"
  std::string remedy;         // one line of what to do; "" for a pass
  std::map<std::string, double> values;  // what was measured, in base units, for monitoring
  // The GPU model a stress figure was measured on (both, "A + B", for a pair of two models);
  // "" for other findings: the cluster compares a figure with the same model's only.
  std::string gpu_model;

  // One line: "GPU1 0000:2a:00.0: PCIe link x8 at 32.0 GT/s, expected x16 at 32.0 GT/s (the
  // link's maximum)".
  std::string summary() const;
};

// The GPU stress tests (gpu_stress.cpp): whether they run, and the bars they judge by, from
// `muster health --stress` and the cluster file's checks.stress* keys.
struct StressSettings {
  bool run = false;  // set by health --stress and doctor only: the cluster file gives the bars
  double peer_ratio = 0.7;      // a figure below this times its peers' median fails (checks.stress_peer_ratio)
  double hardware_ratio = 0.5;  // a copy below this times what its link implies fails (checks.stress_hardware_ratio)
};
// The node's whole stress measurement: within the agents' 15 s for a node's health checks.
inline constexpr std::chrono::milliseconds kStressBudget{8000};

// What the cluster file's `expect:` says a node should have; unset: the device's own
// maximum, or what most nodes have.
struct HealthExpectations {
  std::optional<int> gpus_per_node;
  std::optional<std::string> gpu_model;       // a substring of every GPU's name
  std::optional<int> pcie_gen;                // 1-6
  std::optional<int> pcie_width;              // 1-32 lanes
  std::optional<double> ib_rate_gbps;         // every active IB/RoCE port's rate
  std::optional<int> ib_ports;                // ports per node
  std::optional<std::string> driver_version;  // NVIDIA's, exactly
  // The IB/RoCE ports ACTIVE when this node was recorded ("mlx5_0 port 1"): one down since
  // fails, whatever else is expected.
  std::vector<std::string> active_ib_ports;
  // Which of the above came from this node's record (muster health --record) rather than the
  // cluster file ("gpus_per_node", "pcie_gen", ...), and when it was made.
  std::set<std::string> recorded;
  std::string recorded_at;
  // Whether the GPUs are measured under load too, and the bars (the cluster file's checks.).
  StressSettings stress;

  // Where expectation `name` came from: "expect.NAME", or "this node's record of TIME".
  std::string from(const std::string& name) const;
};

// One counter of a port or interface that only ever grows, read at the start and end of a
// run so that growth during it is named.
struct HealthCounter {
  std::string device;  // "mlx5_0 port 1", "eth0"
  std::string name;    // "symbol_error", "carrier_changes"
  std::uint64_t value = 0;
};

// The facts compared across nodes (the odd node is named beside the majority's value).
struct NodeSoftware {
  std::string nvidia_driver;    // "" without NVML
  std::string cuda_driver;      // "12.4"
  std::string nccl;             // "2.21.5", or "" when NCCL does not load
  std::string nccl_net_plugin;  // "yes" / "no" ("" without NCCL)
  std::string kernel;
  std::string rdma_providers;   // "mlx5" (from /etc/libibverbs.d), "" without
  int nvidia_gpus = 0;          // on the PCI bus
  std::string gpu_model;        // "NVIDIA H100 80GB HBM3" (the first GPU's), "" without
  int nvlinks = 0;              // active NVLinks of all GPUs
  int ib_ports = 0;             // active InfiniBand/RoCE ports
  std::string ib_rates;         // "4 x 400 Gb/sec", "" without
  // The machine's make and model from DMI ("Supermicro SYS-821GE-TNHR"), "" without: nodes
  // are compared with peers of their own model. Last: the report's reader fills the others
  // in order.
  std::string hardware_model;
};

struct NodeHealth {
  bool complete = true;  // false when a check hung: the facts below are partial
  std::vector<HealthFinding> findings;
  std::vector<HealthCounter> counters;
  NodeSoftware software;
};

// Where the checks read: every file under `root` ("/" on a live node; a snapshot of a sick
// node elsewhere), the GPU libraries through `gpus` (nullptr: GPU libraries not asked).
struct HealthSources {
  std::string root = "/";
  GpuLibraries* gpus = nullptr;
  // Set to the name of each check as it starts, so that a check that hangs can be named.
  std::atomic<const char*>* progress = nullptr;
  // Why the GPUs' health cannot be read when `gpus` is null.
  std::string why_no_gpu_libraries = "GPU libraries not asked";
  // Where the baseline of counters that only grow (AER, Xids) is kept (health_state_dir());
  // "": none is kept, and they are judged since boot.
  std::string state_dir;
};

// Every local check of this node.
NodeHealth check_node_health(const HealthSources& sources, const HealthExpectations& expect);

// The same, cut at `deadline`: a read that hangs (NVML on a wedged GPU, a file system that
// stopped answering) gives a failed finding naming the check it hung in, not a hang, with
// what the node's files say when it was NVML that hung; the result is then not complete.
// The stuck reading is left on a thread of its own, which keeps `gpus` alive. `gpus` null:
// NVML is not asked (a snapshot of another machine).
// `state_dir`: as HealthSources's.
NodeHealth check_node_health_within(const std::string& root, std::shared_ptr<GpuLibraries> gpus,
                                    const HealthExpectations& expect, std::chrono::milliseconds deadline,
                                    const std::string& why_no_gpu_libraries = "GPU libraries not asked",
                                    const std::string& state_dir = "");

// What accept_counter_baseline did.
struct AcceptedCounters {
  bool saved = false;
  std::string why_not;  // when not saved
  std::string boot_id;
  size_t counts = 0;    // how many counters (AER files, Xids by GPU) it holds
};

// Takes the AER and Xid counts read under `root` now as this boot's baseline in
// `state_dir`, whatever they are: after a repair (a GPU reset, a reseated card) later runs
// judge only what is new since. Reads the node's files only, not NVML.
AcceptedCounters accept_counter_baseline(const std::string& root, const std::string& state_dir);

// The error counters only (a cheap second read at the end of a run).
std::vector<HealthCounter> read_health_counters(const std::string& root);

// Counters that grew between two reads of one node, as findings.
std::vector<HealthFinding> counter_growth(const std::vector<HealthCounter>& before,
                                          const std::vector<HealthCounter>& after);

// --- The checks, one function each over what was read (exposed for their unit tests) ---

// "16.0 GT/s PCIe" -> 16.0; "2.5 GT/s" -> 2.5; nullopt for "Unknown" or garbage.
std::optional<double> parse_link_speed(const std::string& text);
// 2.5 -> 1, 5 -> 2, 8 -> 3, 16 -> 4, 32 -> 5, 64 -> 6.
int pcie_generation(double gts);
// "200 Gb/sec (4X HDR)" -> 200.
std::optional<double> parse_ib_rate(const std::string& text);

// NVIDIA Xid records in kernel log text (/dev/kmsg records or dmesg lines).
struct XidEvent {
  std::string bus_id;  // "0000:18:00.0"
  int xid = 0;
  std::string text;    // the record's message
};
std::vector<XidEvent> find_xids(const std::string& log);
// Whether an Xid means the GPU is dead or unusable until reset or replaced.
bool xid_is_fatal(int xid, const std::string& text);

}  // namespace muster
