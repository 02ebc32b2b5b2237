// muster topo: a machine's GPUs, NICs and the paths between them, like nvidia-smi topo -m.
#include <algorithm>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/terminal_output.h"
#include "launcher/cluster/job_gpus.h"
#include "topology/cpu_list.h"
#include "topology/topology_source.h"
#include "launcher/text_bytes.h"

namespace muster::cli {

struct TopoOptions {
  std::string xml;
  bool json = false;
};

namespace {

nlohmann::json optional_int(const std::optional<int>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// Devices are numbered GPUs first, then NICs, as nvidia-smi orders them.
std::string device_label(const Topology& t, size_t device) {
  return device < t.gpus.size() ? fmt::format("GPU{}", device)
                                : fmt::format("NIC{}", device - t.gpus.size());
}

// Every device against every device: GPUs first, then NICs, as nvidia-smi orders them.
std::string cell(const Topology& t, size_t row, size_t col) {
  const size_t g = t.gpus.size();
  if (row < g && col < g) return gpu_to_gpu(t, int(row), int(col)).str();
  if (row < g) return gpu_to_nic(t, int(row), int(col - g)).str();
  if (col < g) return gpu_to_nic(t, int(col), int(row - g)).str();
  const auto& a = t.nics[row - g].location;
  const auto& b = t.nics[col - g].location;
  return PathCell{classify_pci_path(a, b), 0}.str();
}

// The job's CUDA device number of the machine's GPU `index`, if the job has it.
std::optional<int> job_device(const std::optional<JobGpus>& job, int index) {
  if (!job) return std::nullopt;
  auto at = std::find(job->gpus.begin(), job->gpus.end(), index);
  if (at == job->gpus.end()) return std::nullopt;
  return int(at - job->gpus.begin());
}

nlohmann::json topology_json(const Topology& t, const std::optional<JobGpus>& job) {
  nlohmann::json j;
  j["source"] = t.source;
  j["machine"] = {{"packages", t.packages}, {"cores", t.cores}, {"pus", t.pus}};
  j["numa_nodes"] = nlohmann::json::array();
  for (const auto& n : t.numa_nodes)
    j["numa_nodes"].push_back({{"index", n.index}, {"memory_bytes", n.memory_bytes},
                               {"cpuset", format_cpu_list(n.cpus)}});
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : t.gpus)
    j["gpus"].push_back({{"index", g.index}, {"pci_bus_id", g.location.bus_id},
                         {"vendor", g.vendor}, {"vendor_id", fmt::format("{:04x}", g.vendor_id)},
                         {"device_id", fmt::format("{:04x}", g.device_id)}, {"model", g.model},
                         {"uuid", g.uuid ? nlohmann::json(*g.uuid) : nlohmann::json(nullptr)},
                         {"numa", optional_int(g.location.numa)},
                         {"cpuset", format_cpu_list(g.location.cpus)},
                         {"job_device", optional_int(job_device(job, g.index))},
                         {"nearest_nics", nlohmann::json::array()}});
  j["nics"] = nlohmann::json::array();
  for (const auto& n : t.nics)
    j["nics"].push_back({{"name", n.name}, {"interfaces", n.interfaces},
                         {"pci_bus_id", n.location.bus_id}, {"numa", optional_int(n.location.numa)},
                         {"cpuset", format_cpu_list(n.location.cpus)}});
  for (size_t g = 0; g < t.gpus.size(); ++g)
    for (int nic : nearest_nics(t, int(g)))
      j["gpus"][g]["nearest_nics"].push_back(t.nics[size_t(nic)].name);
  j["paths"] = nlohmann::json::object();
  const size_t total = t.gpus.size() + t.nics.size();
  for (size_t r = 0; r < t.gpus.size(); ++r)
    for (size_t c = 0; c < total; ++c)
      j["paths"][device_label(t, r)][device_label(t, c)] = cell(t, r, c);
  nlohmann::json to_cpu = nlohmann::json::array();
  for (const auto& c : t.cpu_nvlinks)
    to_cpu.push_back({{"gpu", c.gpu}, {"package", c.package}, {"links", c.links}});
  j["nvlink"] = {{"known", t.nvlinks.has_value()}, {"source", t.nvlink_source}, {"to_cpu", to_cpu}};
  j["gpu_order"] = "PCI_BUS_ID";
  if (job) j["job_gpus"] = {{"source", job->source}, {"summary", job_gpus_summary(*job, t.gpus.size())}};
  return j;
}

std::string topology_text(const Topology& t, const std::optional<JobGpus>& job) {
  std::string out = fmt::format("{}: {} package{}, {} NUMA node{}, {} cores, {} PUs\n", t.source,
                                t.packages, t.packages == 1 ? "" : "s", t.numa_nodes.size(),
                                t.numa_nodes.size() == 1 ? "" : "s", t.cores, t.pus);
  for (const auto& n : t.numa_nodes)
    out += fmt::format("  NUMA {}: {:.1f} GiB, CPUs {}\n", n.index,
                       double(n.memory_bytes) / (1024.0 * 1024 * 1024), format_cpu_list(n.cpus));
  if (t.gpus.empty()) out += "GPUs: none\n";
  // A line per device that fits 80 columns: the model last, wrapped under the bus id, and
  // the UUID (36 columns of its own) on the line below.
  for (const auto& g : t.gpus) {
    const std::string head = fmt::format("GPU{}  {}  NUMA {}  CPUs {}  ", g.index, g.location.bus_id,
                                         g.location.numa ? std::to_string(*g.location.numa) : "-",
                                         format_cpu_list(g.location.cpus));
    const std::string model = g.model.rfind(g.vendor, 0) == 0 ? g.model : g.vendor + " " + g.model;
    out += head + wrap_words(model, kColumns, 6, head.size()) + "\n";
    if (g.uuid) out += fmt::format("      {}\n", *g.uuid);
  }
  if (job && !job_gpus_summary(*job, t.gpus.size()).empty()) {
    std::vector<std::string> held;
    for (size_t d = 0; d < job->gpus.size(); ++d) held.push_back(fmt::format("GPU{} as device {}", job->gpus[d], d));
    out += fmt::format("{} ({})\n", job_gpus_summary(*job, t.gpus.size()),
                       held.empty() ? "none" : fmt::format("{}", fmt::join(held, ", ")));
  }
  if (t.nics.empty()) out += "NICs: none\n";
  for (size_t i = 0; i < t.nics.size(); ++i) {
    const auto& n = t.nics[i];
    out += fmt::format("NIC{}  {}  {}{}  NUMA {}\n", i, n.location.bus_id, n.name,
                       n.interfaces.empty() || n.interfaces.front() == n.name
                           ? ""
                           : fmt::format(" ({})", fmt::join(n.interfaces, ", ")),
                       n.location.numa ? std::to_string(*n.location.numa) : "-");
  }
  const size_t total = t.gpus.size() + t.nics.size();
  if (!t.gpus.empty()) {
    // Column widths come from what is in them: a POWER machine's cpusets run long.
    auto location_of = [&](size_t r) -> const PciLocation& {
      return r < t.gpus.size() ? t.gpus[r].location : t.nics[r - t.gpus.size()].location;
    };
    size_t cell_width = 6, affinity_width = std::string("CPU Affinity").size() + 4;
    for (size_t r = 0; r < total; ++r) {
      cell_width = std::max(cell_width, device_label(t, r).size() + 2);
      affinity_width = std::max(affinity_width, format_cpu_list(location_of(r).cpus).size() + 2);
      for (size_t c = 0; c < total; ++c) cell_width = std::max(cell_width, cell(t, r, c).size() + 2);
    }
    out += "\n" + std::string(cell_width, ' ');
    for (size_t c = 0; c < total; ++c) out += fmt::format("{:<{}}", device_label(t, c), cell_width);
    out += fmt::format("{:<{}}NUMA Affinity\n", "CPU Affinity", affinity_width);
    for (size_t r = 0; r < total; ++r) {
      const PciLocation& loc = location_of(r);
      out += fmt::format("{:<{}}", device_label(t, r), cell_width);
      for (size_t c = 0; c < total; ++c) out += fmt::format("{:<{}}", cell(t, r, c), cell_width);
      out += fmt::format("{:<{}}{}\n", format_cpu_list(loc.cpus), affinity_width,
                         loc.numa ? std::to_string(*loc.numa) : "N/A");
    }
    if (!t.cpu_nvlinks.empty()) {
      std::vector<std::string> links;
      for (const auto& c : t.cpu_nvlinks)
        links.push_back(fmt::format("GPU{} NV{} to package {}", c.gpu, c.links, c.package));
      out += fmt::format("\nNVLink to CPUs: {} (not a path to another GPU)\n", fmt::join(links, ", "));
    }
    out += "\nNearest NICs:";
    if (t.nics.empty()) out += " none";
    out += "\n";
    for (size_t g = 0; g < t.gpus.size() && !t.nics.empty(); ++g) {
      std::vector<int> nearest = nearest_nics(t, int(g));
      std::vector<std::string> names;
      for (int nic : nearest) names.push_back(t.nics[size_t(nic)].name);
      out += fmt::format("  GPU{}: {} ({})\n", g, fmt::join(names, ", "),
                         gpu_to_nic(t, int(g), nearest.front()).str());
    }
    // nvidia-smi topo -m's words, wrapped to 80 columns.
    static const char* const kLegend[][2] = {
        {"X", "Self"},
        {"SYS", "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes"},
        {"NODE", "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
                 "within a NUMA node"},
        {"PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"},
        {"PXB", "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)"},
        {"PIX", "Connection traversing at most a single PCIe bridge (a PCIe switch counts as one)"},
        {"NV#", "Connection traversing a bonded set of # NVLinks"},
    };
    out += "\nLegend:\n";
    for (const auto& [code, meaning] : kLegend)
      out += fmt::format("  {:<4} = {}\n", code, wrap_words(meaning, kColumns, 9, 9));
    out += wrap_words("GPUs are numbered in PCI bus id order, as CUDA numbers them with "
                      "CUDA_DEVICE_ORDER=PCI_BUS_ID.", kColumns, 0) + "\n";
    out += fmt::format("NVLink: {}\n", t.nvlinks ? "from " + t.nvlink_source : t.nvlink_source);
  }
  return out;
}

}  // namespace

CommandAction setup_topo(CLI::App& app) {
  auto options = std::make_shared<TopoOptions>();
  app.add_option("--xml", options->xml, "read an hwloc XML export (lstopo FILE.xml) instead of "
                                        "this machine");
  app.add_flag("--json", options->json, "print JSON (schema: share/muster/topology.schema.json)");
  return [options]() {
    HwlocTopologySource source(options->xml.empty() ? std::nullopt
                                                    : std::optional<std::string>(options->xml));
    Topology topology = source.load();
    // An export is some machine's, not this job's: only this machine has the job's GPUs.
    std::optional<JobGpus> job;
    if (options->xml.empty()) job = job_gpus(topology.gpus, Environment::current());
    print_out(options->json ? report_json_text(topology_json(topology, job), 2) + "\n" : topology_text(topology, job));
    return 0;
  };
}

}  // namespace muster::cli
