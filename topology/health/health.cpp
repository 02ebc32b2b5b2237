#include "topology/health/health.h"

#include <ctime>
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

std::string HealthExpectations::from(const std::string& name) const {
  return recorded.count(name) ? "this node's record of " + recorded_at : "expect." + name;
}

namespace health {

const std::vector<HealthCheck>& health_checks() {
  // The order findings are listed in. NVML and the PCI bus are read before the table, so
  // that every finding about a GPU names its model. Never destroyed: a reading that hung is
  // left on a thread of its own (check_node_health_within), which may still walk the table
  // while the process exits.
  static const auto* checks = new std::vector<HealthCheck>{
      {"pcie_link", check_pcie},            // pcie_link.cpp, pcie_aer.cpp
      {"ib_port", check_ib},                // infiniband.cpp
      {"gpu", check_gpus},                  // gpu_nvml.cpp
      {"gpu_stress", check_gpu_stress},     // gpu_stress.cpp: only when asked (--stress)
      {"xid", check_xids},                  // xid.cpp
      {"software", read_software},          // software.cpp
      {"link_errors", read_link_counters},  // link_counters.cpp
  };
  return *checks;
}

}  // namespace health

namespace health {

std::uint64_t GrowingCounters::judged(const std::string& key, std::uint64_t now) {
  seen[key] = now;
  if (!baseline) return now;
  auto it = baseline->counts.find(key);
  if (it == baseline->counts.end()) return now;
  return now >= it->second ? now - it->second : now;
}

bool GrowingCounters::since_baseline(const std::string& key) const {
  return baseline && baseline->counts.count(key);
}

std::string GrowingCounters::baseline_time() const {
  return baseline ? baseline_time_text(baseline->recorded_at) : std::string("boot");
}

NodeHealth run_checks(const HealthSources& sources, const HealthExpectations& expect, GrowingCounters& growing,
                      const std::function<void(const NodeReading&, const NodeHealth&)>& then) {
  auto starting = [&](const char* check) {
    if (sources.progress) sources.progress->store(check);
  };
  NodeReading node{Root{sources.root}, sources, expect, std::nullopt, sources.why_no_gpu_libraries, {}, {}, &growing};
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
  node.pci = read_pci(node.root, gpu_names);
  NodeHealth out;
  for (const auto& check : health_checks()) {
    starting(check.name);
    check.run(node, out);
  }
  if (then) then(node, out);
  return out;
}

std::optional<std::string> load_baseline(const HealthSources& sources, GrowingCounters& growing,
                                         std::string& why_not) {
  if (sources.state_dir.empty()) return std::nullopt;
  // A baseline of another boot says nothing of this one: its counters started again at 0.
  auto boot_id = read_boot_id(sources.root);
  if (boot_id) {
    auto baseline = load_counter_baseline(sources.state_dir, sources.root, why_not);
    if (baseline && baseline->boot_id == *boot_id) growing.baseline = std::move(baseline);
  }
  return boot_id;
}

}  // namespace health

NodeHealth check_node_health(const HealthSources& sources, const HealthExpectations& expect) {
  health::GrowingCounters growing;
  std::string why_no_baseline;
  const std::optional<std::string> boot_id = health::load_baseline(sources, growing, why_no_baseline);
  NodeHealth out = health::run_checks(sources, expect, growing);
  // The first run of a boot keeps what it saw as the baseline, less the counts that failed:
  // those fail again until an operator accepts them (--accept-counters), not only once.
  if (boot_id && !growing.baseline && why_no_baseline.empty()) {
    CounterBaseline taken{*boot_id, std::time(nullptr), {}};
    for (const auto& [key, value] : growing.seen)
      if (!growing.failed.count(key)) taken.counts[key] = value;
    save_counter_baseline(sources.state_dir, sources.root, taken, why_no_baseline);
  }
  if (!why_no_baseline.empty()) {
    HealthFinding f = health::finding("counter_baseline", HealthStatus::Warn, "",
                                      why_no_baseline + "; AER errors and Xids are judged since boot");
    f.remedy = "fix the state directory, or point MUSTER_STATE_DIR at one of this user's";
    out.findings.push_back(std::move(f));
  }
  return out;
}

AcceptedCounters accept_counter_baseline(const std::string& root, const std::string& state_dir) {
  AcceptedCounters accepted;
  auto boot_id = read_boot_id(root);
  if (!boot_id) {
    accepted.why_not = fmt::format("cannot read the boot id under {} (proc/sys/kernel/random/boot_id)", root);
    return accepted;
  }
  health::GrowingCounters growing;
  HealthSources files_only{root, nullptr, nullptr, "not asked: accepting counters"};
  health::run_checks(files_only, HealthExpectations{}, growing);
  CounterBaseline taken{*boot_id, std::time(nullptr), std::move(growing.seen)};
  accepted.boot_id = *boot_id;
  accepted.counts = taken.counts.size();
  accepted.saved = save_counter_baseline(state_dir, root, taken, accepted.why_not);
  return accepted;
}

}  // namespace muster
