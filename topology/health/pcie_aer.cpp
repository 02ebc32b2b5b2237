// The AER counters the kernel keeps per PCI device: fatal and non-fatal uncorrectable errors
// fail the device, correctable ones warn.
#include <cstdint>
#include <fstream>

#include <fmt/format.h>

#include "topology/health/checks.h"

namespace muster::health {

namespace {

// The AER counters the kernel keeps per device (aer_dev_fatal, aer_dev_nonfatal,
// aer_dev_correctable: "NAME COUNT" lines ending in "TOTAL_ERR_... N").
std::optional<std::uint64_t> aer_total(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::uint64_t total = 0, listed = 0;
  bool has_total = false;
  int lines = 0;
  for (std::string name, count; lines++ < 256 && in >> name >> count;) {
    std::uint64_t v = 0;
    try {
      v = std::stoull(count);
    } catch (const std::exception&) {
      continue;
    }
    if (name.rfind("TOTAL_", 0) == 0) {
      total = v;
      has_total = true;
    } else {
      listed += v;
    }
  }
  return has_total ? total : listed;
}

}  // namespace

std::vector<HealthFinding> check_aer(const std::string& label, const fs::path& dir, GrowingCounters& growing) {
  std::vector<HealthFinding> out;
  struct Kind {
    const char* file;
    const char* what;
    Status status;
  };
  for (const Kind& k : {Kind{"aer_dev_fatal", "fatal", Status::Fail},
                        Kind{"aer_dev_nonfatal", "uncorrectable (non-fatal)", Status::Fail},
                        Kind{"aer_dev_correctable", "correctable", Status::Warn}}) {
    auto total = aer_total(dir / k.file);
    if (!total) continue;
    // By the device's own address, not its label: NVML's name for a GPU may come and go.
    const std::string key = fmt::format("aer/{}/{}", dir.filename().string(), k.file);
    const std::uint64_t judged = growing.judged(key, *total);
    if (judged == 0) continue;
    if (k.status == Status::Fail) growing.failed.insert(key);
    const bool since_baseline = growing.since_baseline(key);
    HealthFinding f = finding("pcie_aer", k.status, label,
                              since_baseline ? fmt::format("{} new {} PCIe errors (AER) since {} ({} since boot)", judged,
                                                           k.what, growing.baseline_time(), *total)
                                             : fmt::format("{} {} PCIe errors (AER) since boot", *total, k.what));
    f.expected = "0";
    f.expected_from = since_baseline ? "the baseline accepted at " + growing.baseline_time() : "a healthy link";
    f.remedy = k.status == Status::Fail ? "the device or its slot is failing: drain the node, reseat or replace the card; once repaired, "
                                          "muster health --accept-counters"
                                        : "a few are normal; a growing count points at the slot, riser or card";
    f.values = {{std::string("pcie_aer_") + k.file + "_total", double(*total)}};
    out.push_back(f);
  }
  return out;
}

}  // namespace muster::health
