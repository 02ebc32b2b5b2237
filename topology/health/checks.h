// The interface every family of health checks implements, and the table of them. NHC keeps
// one script per family (lbnl_hw.nhc, lbnl_net.nhc), DCGM one plugin per test: here each
// family is a file of its own with one entry point, from what the node reading holds to
// findings, and adding a check is adding a file and a row in health_checks(). Internal to
// topology/health/.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "topology/health/counter_baseline.h"
#include "topology/health/health.h"
#include "topology/health/pci_devices.h"
#include "topology/health/sysfs_reading.h"

namespace muster::health {

// The counters that only grow (AER, Xids), judged against this boot's baseline where it
// holds them and since boot where it does not; what was read is kept for the next baseline.
struct GrowingCounters {
  std::optional<CounterBaseline> baseline;     // this boot's; unset: everything since boot
  std::map<std::string, std::uint64_t> seen;   // every count read, by key
  std::set<std::string> failed;                // keys whose count failed: not taken unaccepted

  // The part of `now` to judge: what is new since the baseline where it holds `key` (all of
  // it when the counter went back, as a device's does when it is removed and found again),
  // else all of it. Keeps `now` as seen.
  std::uint64_t judged(const std::string& key, std::uint64_t now);
  // Whether `key` is judged against the baseline.
  bool since_baseline(const std::string& key) const;
  // "since 2026-11-27 14:40:05 UTC": when the baseline was taken.
  std::string baseline_time() const;
};

// What is read once and shared by the checks: the node's files, NVML's answer and the PCI
// devices.
struct NodeReading {
  Root root;
  const HealthSources& sources;
  const HealthExpectations& expect;
  std::optional<NvmlHealthReading> nvml;   // unset: NVML not asked or did not answer
  std::string why_no_nvml;                 // why not, then
  PciView pci;
  std::set<std::string> busy_gpus;         // bus ids of GPUs at work: their links stay at full speed
  GrowingCounters* growing = nullptr;      // never null while the checks run
};

// One family of checks: its name (the `check` of a finding it makes, and what a hang in it is
// called) and what it does.
struct HealthCheck {
  const char* name;
  void (*run)(const NodeReading& node, NodeHealth& out);
};

// The families in the order they run and their findings are listed.
const std::vector<HealthCheck>& health_checks();

// ---- the families' entry points, one file each ----

void check_pcie(const NodeReading& node, NodeHealth& out);       // pcie_link.cpp (and pcie_aer.cpp)
void check_ib(const NodeReading& node, NodeHealth& out);         // infiniband.cpp
void check_gpus(const NodeReading& node, NodeHealth& out);       // gpu_nvml.cpp
void check_xids(const NodeReading& node, NodeHealth& out);       // xid.cpp
void read_software(const NodeReading& node, NodeHealth& out);    // software.cpp
void read_link_counters(const NodeReading& node, NodeHealth& out);  // link_counters.cpp
void check_gpu_stress(const NodeReading& node, NodeHealth& out);    // gpu_stress.cpp (only when asked)

// Reads NVML and the PCI bus once, then runs every family of checks over them; `then` is
// given the reading and the findings (health.cpp).
NodeHealth run_checks(const HealthSources& sources, const HealthExpectations& expect, GrowingCounters& growing,
                      const std::function<void(const NodeReading&, const NodeHealth&)>& then = {});
// Loads this boot's baseline into `growing` when `sources` keep one; the boot id, when read.
std::optional<std::string> load_baseline(const HealthSources& sources, GrowingCounters& growing, std::string& why_not);

// ---- what one family lends another ----

// A PCIe link's width and speed.
struct PcieLinkRate {
  int width = 0;
  double speed_gts = 0;
};
// The best a GPU's link can train at: the lower of its own and the port above's maxima
// (pcie_link.cpp); nullopt when unreadable.
std::optional<PcieLinkRate> link_at_best(const NodeReading& node, const PciDevice& device);
// The width and speed it trained at now; nullopt when unreadable.
std::optional<PcieLinkRate> link_now(const PciDevice& device);
// The IB/RoCE ports ACTIVE and LinkUp ("mlx5_0 port 1"), and the rate every active
// InfiniBand port shares, if one (infiniband.cpp).
struct ActivePorts {
  std::vector<std::string> names;
  std::optional<double> common_ib_rate;
};
ActivePorts active_ib_ports(const Root& root);

// The AER counters of one PCI device as findings (pcie_aer.cpp).
std::vector<HealthFinding> check_aer(const std::string& label, const fs::path& dir, GrowingCounters& growing);
// Every IB/RoCE port's error counters (infiniband.cpp).
void read_ib_counters(const Root& root, std::vector<HealthCounter>& out);
// Every physical interface's carrier_changes (link_counters.cpp).
void read_carriers(const Root& root, std::vector<HealthCounter>& out);

}  // namespace muster::health
