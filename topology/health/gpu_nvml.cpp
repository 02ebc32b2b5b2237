// The GPUs through NVML: count and model, GPUs NVML cannot open, ECC, retired pages and row
// remaps, clocks held down, NVLinks and temperature.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "topology/health/checks.h"
#include "topology/nvml.h"

namespace muster::health {

namespace {

std::string gpu_label(const GpuHealthReading& g) {
  return fmt::format("GPU{} {}{}", g.index, g.bus_id.empty() ? "?" : g.bus_id, g.name.empty() ? "" : " " + g.name);
}

}  // namespace

void check_gpus(const NodeReading& node, NodeHealth& out) {
  const PciView& pci = node.pci;
  const std::optional<NvmlHealthReading>& nvml = node.nvml;
  const std::string& why_not = node.why_no_nvml;
  const HealthExpectations& expect = node.expect;
  out.software.nvidia_gpus = int(pci.nvidia_gpus.size());
  if (nvml) {
    out.software.nvidia_driver = nvml->driver_version;
    if (nvml->cuda_driver_version) out.software.cuda_driver = cuda_version_text(*nvml->cuda_driver_version);
  }
  const int on_bus = int(pci.nvidia_gpus.size());
  if (expect.gpus_per_node) {
    const int seen = pci.listed ? on_bus : nvml ? int(nvml->device_count) : -1;
    if (seen != *expect.gpus_per_node) {
      HealthFinding f = finding("gpu_count", seen < 0 ? Status::Unknown : Status::Fail, "",
                                seen < 0 ? "GPUs could not be counted: " + pci.why_not
                                         : fmt::format("{} NVIDIA GPU{} on the PCI bus", seen, seen == 1 ? "" : "s"));
      f.expected = std::to_string(*expect.gpus_per_node);
      f.expected_from = expect.from("gpus_per_node");
      f.remedy = "a GPU is missing from the bus: check its power and seating, and dmesg for Xid 79";
      out.findings.push_back(f);
    }
  }
  if (!nvml) {
    if (pci.listed && on_bus == 0)
      out.findings.push_back(finding("gpu", Status::Absent, "", "no NVIDIA GPU on the PCI bus"));
    else {
      HealthFinding f = finding("gpu", Status::Unknown, "",
                                fmt::format("{} NVIDIA GPU{} on the PCI bus, but their health cannot be read: {}",
                                            on_bus, on_bus == 1 ? "" : "s", why_not));
      f.remedy = "load the NVIDIA driver (nvidia-smi must list the GPUs)";
      out.findings.push_back(f);
    }
    return;
  }
  const size_t first = out.findings.size();
  auto add = [&](const GpuHealthReading& g, const char* check, Status status, std::string observed,
                 std::string expected, std::string from, std::string remedy,
                 std::map<std::string, double> values = {}) {
    HealthFinding f = finding(check, status, gpu_label(g), std::move(observed));
    f.expected = std::move(expected);
    f.expected_from = std::move(from);
    f.remedy = std::move(remedy);
    f.values = std::move(values);
    out.findings.push_back(std::move(f));
  };
  // A GPU on the bus that NVML cannot open has, as operators say, fallen off the bus. NVML
  // counts in bus order, so the k-th GPU it cannot open is the k-th one on the bus it did not
  // open: that names its bus id. One a cgroup hides from this process (a Slurm job's share)
  // answers "no permission" and is not this process's to judge.
  std::set<std::string> opened;
  for (const auto& g : nvml->gpus)
    if (g.error.empty()) opened.insert(g.bus_id);
  std::vector<std::string> unopened;
  for (const auto& bus : pci.nvidia_gpus)
    if (!opened.count(bus)) unopened.push_back(bus);
  size_t next_unopened = 0;
  for (const auto& g : nvml->gpus) {
    if (g.error.empty()) continue;
    const std::string bus = next_unopened < unopened.size() ? unopened[next_unopened++] : "?";
    HealthFinding f = finding("gpu_count", Status::Fail, fmt::format("GPU{} {}", g.index, bus),
                              "NVML cannot open it: " + g.error);
    if (g.error_code == kNvmlNoPermission) {
      f.status = Status::Absent;
      f.observed = "hidden from this process (a cgroup or container holds it for another job)";
    } else {
      f.expected = "a GPU NVML can open";
      f.remedy = "the GPU has fallen off the bus or hangs: drain the node, reset the GPU or reboot; replace it if it recurs";
    }
    out.findings.push_back(f);
  }
  // On the bus and not even counted: a container shows NVML only its own GPUs, so this alone
  // is no proof; a GPU that fell off the bus also leaves an Xid 79, which the xid check fails.
  for (size_t k = next_unopened; k < unopened.size(); ++k) {
    HealthFinding f = finding("gpu_count", Status::Unknown, "GPU " + unopened[k],
                              "on the PCI bus, but NVML does not count it");
    f.expected = "counted by NVML";
    f.remedy = "hidden by a container, or lost by the driver: nvidia-smi on the host lists it, or dmesg shows Xid 79";
    out.findings.push_back(f);
  }
  std::vector<std::string> unanswered;
  for (const auto& g : nvml->gpus) {
    if (!g.error.empty()) continue;
    if (out.software.gpu_model.empty()) out.software.gpu_model = g.name;
    if (expect.gpu_model && g.name.find(*expect.gpu_model) == std::string::npos)
      add(g, "gpu_model", Status::Fail, "model " + g.name, "'" + *expect.gpu_model + "'", expect.from("gpu_model"),
          "this node has other GPUs than the cluster file expects");
    if (g.persistence_mode == false)
      add(g, "gpu_persistence", Status::Warn, "persistence mode off", "on", "NVIDIA's advice for compute nodes",
          "nvidia-smi -pm 1, or run nvidia-persistenced: without it each job start re-initialises the GPU");
    if (g.ecc_enabled == false)
      add(g, "gpu_ecc", Status::Warn, "ECC off", "on", "a data-centre GPU", "nvidia-smi -e 1, then reset the GPU");
    if (g.ecc_volatile_uncorrected.value_or(0) > 0)
      add(g, "gpu_ecc", Status::Fail, fmt::format("{} uncorrectable ECC errors since the driver loaded",
                                                  *g.ecc_volatile_uncorrected),
          "0", "a healthy GPU", "drain the node and reset the GPU; replace it if they return",
          {{"gpu_ecc_volatile_uncorrected", double(*g.ecc_volatile_uncorrected)}});
    else if (g.ecc_aggregate_uncorrected.value_or(0) > 0)
      add(g, "gpu_ecc", Status::Warn, fmt::format("{} uncorrectable ECC errors in its lifetime", *g.ecc_aggregate_uncorrected),
          "0", "a healthy GPU", "watch for more; the GPU's memory has failed before",
          {{"gpu_ecc_aggregate_uncorrected", double(*g.ecc_aggregate_uncorrected)}});
    if (g.retired_pages_pending == true)
      add(g, "gpu_memory", Status::Fail, "retired pages pending", "none pending", "a healthy GPU",
          "drain the node and reset the GPU (nvidia-smi -r) or reboot, so that the pages are retired");
    if (g.row_remaps && g.row_remaps->failed)
      add(g, "gpu_memory", Status::Fail, "a row remap failed", "no failed remap", "a healthy GPU",
          "the GPU has run out of spare rows: replace it (RMA)");
    else if (g.row_remaps && g.row_remaps->pending)
      add(g, "gpu_memory", Status::Fail,
          fmt::format("row remap pending ({} rows remapped for uncorrectable errors)", g.row_remaps->uncorrected),
          "no pending remap", "a healthy GPU",
          "drain the node and reset the GPU (nvidia-smi -r) or reboot to apply the remap",
          {{"gpu_remapped_rows_uncorrectable", double(g.row_remaps->uncorrected)}});
    if (g.throttle_reasons) {
      const std::uint64_t r = *g.throttle_reasons;
      // Slowdowns the GPU did not choose for a job's sake (power caps, application clocks and
      // idle are normal): each one means the GPU runs slower than its peers.
      std::vector<std::string> slowdowns;
      if (r & throttle::kHwSlowdown) slowdowns.push_back("hardware slowdown");
      if (r & throttle::kHwThermalSlowdown) slowdowns.push_back("hardware thermal slowdown");
      if (r & throttle::kHwPowerBrakeSlowdown) slowdowns.push_back("power brake");
      if (r & throttle::kSwThermalSlowdown) slowdowns.push_back("software thermal slowdown");
      if (!slowdowns.empty())
        add(g, "gpu_clocks", Status::Fail, fmt::format("clocks held down: {}", fmt::join(slowdowns, ", ")),
            "no slowdown", "a healthy GPU",
            "check cooling, fans, power supplies and the power-brake signal; the GPU runs slow",
            {{"gpu_clocks_throttle_reasons", double(r)}});
    }
    int down = 0, with_errors = 0;
    std::vector<std::string> down_links;
    for (const auto& l : g.nvlinks) {
      if (!l.active) {
        ++down;
        down_links.push_back(std::to_string(l.link));
      }
      if (l.recovery.value_or(0) + l.replay.value_or(0) + l.crc_flit.value_or(0) + l.crc_data.value_or(0) > 0)
        ++with_errors;
    }
    out.software.nvlinks += int(g.nvlinks.size()) - down;
    // Every link down is a GPU whose NVLinks are not connected (a PCIe card without a
    // bridge): nothing to judge here; doctor compares the nodes' NVLink counts. Some up and
    // some down is a broken link.
    if (down && down < int(g.nvlinks.size()))
      add(g, "gpu_nvlink", Status::Fail,
          fmt::format("NVLink{} {} of {} down", down == 1 ? "" : "s", fmt::join(down_links, ", "), g.nvlinks.size()),
          fmt::format("{} active", g.nvlinks.size()), "the links the GPU has",
          "traffic between GPUs falls back to PCIe: drain the node, reset the GPUs; check the NVSwitch/baseboard",
          {{"gpu_nvlinks_down", double(down)}});
    else if (with_errors)
      add(g, "gpu_nvlink", Status::Warn, fmt::format("{} NVLink{} with replay, recovery or CRC errors", with_errors,
                                                    with_errors == 1 ? "" : "s"),
          "0", "a healthy link", "watch for growth: nvidia-smi nvlink -e");
    if (g.temperature_c && g.slowdown_temperature_c && *g.temperature_c + 5 >= *g.slowdown_temperature_c)
      add(g, "gpu_temperature", *g.temperature_c >= *g.slowdown_temperature_c ? Status::Fail : Status::Warn,
          fmt::format("{} C", *g.temperature_c), fmt::format("below {} C", *g.slowdown_temperature_c),
          "the GPU's slowdown threshold", "check the node's cooling and fans",
          {{"gpu_temperature_celsius", double(*g.temperature_c)}});
    if (!g.ecc_enabled || !g.throttle_reasons || !g.temperature_c || (!g.row_remaps && !g.retired_pages_pending))
      unanswered.push_back(fmt::format("GPU{}", g.index));
  }
  if (!unanswered.empty()) {
    HealthFinding f = finding("gpu", Status::Unknown, "",
                              fmt::format("NVML did not answer every health query for {} (ECC, memory, clocks or "
                                          "temperature: not supported on this GPU or an error)",
                                          fmt::join(unanswered, ", ")));
    f.remedy = "nvidia-smi -q shows what the GPU supports";
    out.findings.push_back(f);
  }
  if (out.findings.size() == first)
    out.findings.push_back(finding("gpu", Status::Pass, "",
                                   fmt::format("{} GPU{} ({}): ECC, memory, clocks, NVLinks and temperature healthy",
                                               nvml->gpus.size(), nvml->gpus.size() == 1 ? "" : "s",
                                               out.software.gpu_model)));
}

}  // namespace muster::health
