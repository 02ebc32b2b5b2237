#include "topology/health/health.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "topology/health/checks.h"

namespace muster {

const char* health_status_name(HealthStatus s) {
  switch (s) {
    case HealthStatus::Pass: return "pass";
    case HealthStatus::Warn: return "warn";
    case HealthStatus::Fail: return "fail";
    case HealthStatus::Unknown: return "unknown";
    case HealthStatus::Absent: return "absent";
  }
  return "?";
}

std::string HealthFinding::summary() const {
  std::string out = device.empty() ? observed : fmt::format("{}: {}", device, observed);
  if (!expected.empty())
    out += fmt::format(", expected {}{}", expected, expected_from.empty() ? "" : " (" + expected_from + ")");
  return out;
}

namespace health {

const std::vector<HealthCheck>& health_checks() {
  // The order findings are listed in. NVML and the PCI bus are read before the table, so
  // that every finding about a GPU names its model.
  static const std::vector<HealthCheck> checks = {
      {"pcie_link", check_pcie},            // pcie_link.cpp, pcie_aer.cpp
      {"ib_port", check_ib},                // infiniband.cpp
      {"gpu", check_gpus},                  // gpu_nvml.cpp
      {"xid", check_xids},                  // xid.cpp
      {"software", read_software},          // software.cpp
      {"link_errors", read_link_counters},  // link_counters.cpp
  };
  return checks;
}

}  // namespace health

NodeHealth check_node_health(const HealthSources& sources, const HealthExpectations& expect) {
  auto starting = [&](const char* check) {
    if (sources.progress) sources.progress->store(check);
  };
  health::NodeReading node{health::Root{sources.root}, sources, expect, std::nullopt, sources.why_no_gpu_libraries,
                           {}, {}};
  // NVML first: its names make every finding about a GPU name its model.
  starting("gpu");
  if (sources.gpus) node.nvml = sources.gpus->read_nvml(node.why_no_nvml);
  std::map<std::string, std::string> gpu_names;
  if (node.nvml)
    for (const auto& g : node.nvml->gpus) {
      if (!g.error.empty()) continue;
      if (!g.name.empty()) gpu_names[g.bus_id] = g.name;
      // A GPU at work keeps its link at full speed.
      if (g.throttle_reasons && !(*g.throttle_reasons & throttle::kGpuIdle)) node.busy_gpus.insert(g.bus_id);
    }
  starting("pcie_link");
  node.pci = health::read_pci(node.root, gpu_names);
  NodeHealth out;
  for (const auto& check : health::health_checks()) {
    starting(check.name);
    check.run(node, out);
  }
  return out;
}

}  // namespace muster
