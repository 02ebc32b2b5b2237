#include "topology/health/node_record.h"

#include <algorithm>
#include <ctime>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "topology/health/checks.h"
#include "topology/health/state_files.h"

namespace muster {

namespace {

// node.<machine-id>.record
constexpr const char* kFileStem = "node";
constexpr const char* kFileSuffix = "record";
constexpr const char* kHeader = "muster-node-record 1";
constexpr size_t kMaxPorts = 1024;

// What the record says, as text, one fact a line: "KEY VALUE".
std::string record_text(const HealthExpectations& r, std::time_t at, const std::string& machine) {
  std::string text = fmt::format("{}\nrecorded_at {}\n", kHeader, static_cast<long long>(at));
  if (!machine.empty()) text += fmt::format("machine_id {}\n", machine);
  if (r.gpus_per_node) text += fmt::format("gpus_per_node {}\n", *r.gpus_per_node);
  if (r.gpu_model) text += fmt::format("gpu_model {}\n", *r.gpu_model);
  if (r.pcie_gen) text += fmt::format("pcie_gen {}\n", *r.pcie_gen);
  if (r.pcie_width) text += fmt::format("pcie_width {}\n", *r.pcie_width);
  if (r.ib_ports) text += fmt::format("ib_ports {}\n", *r.ib_ports);
  if (r.ib_rate_gbps) text += fmt::format("ib_rate_gbps {:g}\n", *r.ib_rate_gbps);
  for (const auto& port : r.active_ib_ports) text += fmt::format("active_ib_port {}\n", port);
  return text;
}

// A number in the record within `low`..`high`, else nullopt (a record edited by hand, or
// not muster's).
std::optional<int> whole(const std::string& text, int low, int high) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  return end && *end == '\0' && v >= low && v <= high ? std::optional(int(v)) : std::nullopt;
}

// Printable text of a sane length, as NVML's names and sysfs port names are.
bool printable(const std::string& text) {
  return !text.empty() && text.size() <= 256 &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= ' ' && c != 0x7f; });
}

}  // namespace

RecordedNode record_node(const HealthSources& sources, const std::string& state_dir) {
  RecordedNode result;
  health::GrowingCounters growing;
  std::string why_no_baseline;
  health::load_baseline(sources, growing, why_no_baseline);
  HealthExpectations& r = result.record;
  std::string sick;
  health::run_checks(sources, HealthExpectations{}, growing, [&](const health::NodeReading& node, const NodeHealth& h) {
    for (const auto& f : h.findings)
      if (f.status == HealthStatus::Fail && sick.empty()) sick = f.summary();
    if (h.software.nvidia_gpus > 0) r.gpus_per_node = h.software.nvidia_gpus;
    if (!h.software.gpu_model.empty()) r.gpu_model = h.software.gpu_model;
    // The weakest GPU link at its best: the slot a card sits in is part of the node.
    for (const auto& d : node.pci.devices) {
      if (d.role != health::Role::Gpu || !d.nvidia_gpu) continue;
      if (auto best = health::link_at_best(node, d)) {
        const int gen = pcie_generation(best->speed_gts);
        r.pcie_gen = r.pcie_gen ? std::min(*r.pcie_gen, gen) : gen;
        r.pcie_width = r.pcie_width ? std::min(*r.pcie_width, best->width) : best->width;
      }
    }
    const health::ActivePorts ports = health::active_ib_ports(node.root);
    if (!ports.names.empty()) {
      r.ib_ports = int(ports.names.size());
      r.active_ib_ports = ports.names;
      r.ib_rate_gbps = ports.common_ib_rate;
    }
  });
  if (!sick.empty()) {
    result.why_not = "not recorded: a check fails (" + sick + "); repair the node first, a record of a sick node "
                     "would expect its sickness";
    return result;
  }
  const std::time_t now = std::time(nullptr);
  r.recorded_at = baseline_time_text(now);
  result.saved = write_state_file(state_dir, state_file_of_machine(sources.root, kFileStem, kFileSuffix),
                                  record_text(r, now, state_machine_id(sources.root)), result.why_not);
  return result;
}

HealthExpectations with_node_record(const HealthExpectations& expect, const std::string& root,
                                    const std::string& state_dir, std::string& why_not) {
  auto text = read_machine_state_file(state_dir, root, kFileStem, kFileSuffix, why_not);
  if (!text) return expect;
  HealthExpectations record;
  std::istringstream in(*text);
  std::string line;
  bool header = false, dated = false;
  std::string recorded_machine;
  while (std::getline(in, line)) {
    if (!header) {
      if (line != kHeader) break;
      header = true;
      continue;
    }
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    if (key == "machine_id") recorded_machine = value;
    else if (key == "recorded_at") {
      char* end = nullptr;
      const long long at = std::strtoll(value.c_str(), &end, 10);
      if ((dated = end && *end == '\0')) record.recorded_at = baseline_time_text(std::time_t(at));
    } else if (key == "gpus_per_node") record.gpus_per_node = whole(value, 0, 1024);
    else if (key == "gpu_model" && printable(value)) record.gpu_model = value;
    else if (key == "pcie_gen") record.pcie_gen = whole(value, 1, 6);
    else if (key == "pcie_width") record.pcie_width = whole(value, 1, 32);
    else if (key == "ib_ports") record.ib_ports = whole(value, 0, 1024);
    else if (key == "ib_rate_gbps") {
      if (auto rate = health::number_in(value + " Gb/sec", "Gb/sec")) record.ib_rate_gbps = rate;
    } else if (key == "active_ib_port" && printable(value) && record.active_ib_ports.size() < kMaxPorts)
      record.active_ib_ports.push_back(value);
  }
  if (!header || !dated) {
    why_not = fmt::format("{}/{} is not a muster node record: ignored", state_dir,
                          state_file_of_machine(root, kFileStem, kFileSuffix));
    return expect;
  }
  // Only a record of this very machine applies: one without a machine-id (a snapshot that
  // lacked it) or of another machine holds nobody to it.
  if (recorded_machine.empty() || recorded_machine != state_machine_id(root)) return expect;
  // The cluster file's own expectations win: the record fills what it leaves unset.
  HealthExpectations out = expect;
  out.recorded_at = record.recorded_at;
  auto fill = [&](auto& mine, const auto& recorded, const char* name) {
    if (!mine && recorded) {
      mine = recorded;
      out.recorded.insert(name);
    }
  };
  fill(out.gpus_per_node, record.gpus_per_node, "gpus_per_node");
  fill(out.gpu_model, record.gpu_model, "gpu_model");
  fill(out.pcie_gen, record.pcie_gen, "pcie_gen");
  fill(out.pcie_width, record.pcie_width, "pcie_width");
  fill(out.ib_ports, record.ib_ports, "ib_ports");
  fill(out.ib_rate_gbps, record.ib_rate_gbps, "ib_rate_gbps");
  if (out.active_ib_ports.empty()) out.active_ib_ports = record.active_ib_ports;
  return out;
}

std::string node_record_text(const HealthExpectations& r) {
  std::vector<std::string> parts;
  if (r.gpus_per_node)
    parts.push_back(fmt::format("{} GPU{}{}", *r.gpus_per_node, *r.gpus_per_node == 1 ? "" : "s",
                                r.gpu_model ? " " + *r.gpu_model : ""));
  if (r.pcie_gen || r.pcie_width)
    parts.push_back(fmt::format("GPU links at Gen{} x{}", r.pcie_gen ? std::to_string(*r.pcie_gen) : "?",
                                r.pcie_width ? std::to_string(*r.pcie_width) : "?"));
  if (r.ib_ports)
    parts.push_back(fmt::format("{} active IB/RoCE port{} ({}){}", *r.ib_ports, *r.ib_ports == 1 ? "" : "s",
                                fmt::join(r.active_ib_ports, ", "),
                                r.ib_rate_gbps ? fmt::format(" at {:g} Gb/s", *r.ib_rate_gbps) : ""));
  return parts.empty() ? "no GPU and no active IB port" : fmt::format("{}", fmt::join(parts, ", "));
}

NodeHealth check_node_against_its_record(const std::string& root, std::shared_ptr<GpuLibraries> gpus,
                                         const HealthExpectations& expect, std::chrono::milliseconds deadline,
                                         const std::string& why_no_gpu_libraries, const std::string& state_dir) {
  std::string why_no_record;
  const HealthExpectations merged = with_node_record(expect, root, state_dir, why_no_record);
  NodeHealth health = check_node_health_within(root, std::move(gpus), merged, deadline, why_no_gpu_libraries, state_dir);
  if (!why_no_record.empty()) {
    HealthFinding f;
    f.check = "node_record";
    f.status = HealthStatus::Warn;
    f.observed = why_no_record + "; checked without it";
    f.remedy = "muster health --record on the healthy node writes it again";
    health.findings.push_back(std::move(f));
  }
  return health;
}

}  // namespace muster
