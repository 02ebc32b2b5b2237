// Counters of links that only grow (IB error counters, Ethernet carrier changes): read at
// the start and end of a run, so that growth during it is named.
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "topology/health/checks.h"

namespace muster {

namespace health {

// Physical interfaces only: a veth or a bridge has no `device` link.
void read_carriers(const Root& root, std::vector<HealthCounter>& out) {
  const fs::path dir = root.at("/sys/class/net");
  for (const auto& name : list_dir(dir).value_or(std::vector<std::string>{})) {
    if (pci_function_of(dir / name).empty()) continue;
    if (auto v = read_count(dir / name / "carrier_changes")) out.push_back({name, "carrier_changes", *v});
  }
}

void read_link_counters(const NodeReading& node, NodeHealth& out) { read_carriers(node.root, out.counters); }

}  // namespace health

using health::Root;
using health::Status;
using health::finding;

std::vector<HealthCounter> read_health_counters(const std::string& root_dir) {
  const Root root{root_dir};
  std::vector<HealthCounter> out;
  health::read_ib_counters(root, out);
  health::read_carriers(root, out);
  return out;
}

std::vector<HealthFinding> counter_growth(const std::vector<HealthCounter>& before,
                                          const std::vector<HealthCounter>& after) {
  std::map<std::pair<std::string, std::string>, std::uint64_t> start;
  for (const auto& c : before) start[{c.device, c.name}] = c.value;
  std::map<std::string, std::vector<std::string>> grown;  // device -> "name +N"
  std::map<std::string, bool> fatal;
  for (const auto& c : after) {
    auto it = start.find({c.device, c.name});
    if (it == start.end() || c.value <= it->second) continue;
    grown[c.device].push_back(fmt::format("{} +{}", c.name, c.value - it->second));
    // A link that went down (or an Ethernet carrier lost) during the run is a flapping link.
    fatal[c.device] = fatal[c.device] || c.name == "link_downed" || c.name == "carrier_changes";
  }
  std::vector<HealthFinding> out;
  for (const auto& [device, parts] : grown) {
    HealthFinding f = finding("link_errors", fatal[device] ? Status::Fail : Status::Warn, device,
                              fmt::format("error counters grew during the run: {}", fmt::join(parts, ", ")));
    f.expected = "no growth";
    f.expected_from = "a healthy link";
    f.remedy = fatal[device] ? "the link flapped: check the cable, transceiver and switch port"
                             : "errors on a live link: check the cable and transceiver (mlxlink, ethtool -S)";
    out.push_back(f);
  }
  return out;
}

}  // namespace muster
