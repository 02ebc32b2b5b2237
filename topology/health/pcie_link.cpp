// The PCIe links of GPUs, NICs and the bridges above them, against their maxima or the
// cluster file's expectations; each device's AER counters (pcie_aer.cpp) in the same pass.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "topology/health/checks.h"

namespace muster {

namespace {

// Each PCIe generation's transfer rate, Gen1 first.
constexpr double kPcieSpeeds[] = {2.5, 5, 8, 16, 32, 64};

}  // namespace

std::optional<double> parse_link_speed(const std::string& text) {
  // "16.0 GT/s PCIe" (kernels since 4.13), "8 GT/s" (older), "Unknown" on a link that is
  // down or a kernel that cannot tell.
  return health::number_in(text, "GT/s");
}

int pcie_generation(double gts) {
  for (int g = 6; g >= 1; --g)
    if (gts >= kPcieSpeeds[g - 1] - 0.01) return g;
  return 0;
}

namespace health {

namespace {

struct LinkState {
  std::optional<double> speed, max_speed;
  std::optional<int> width, max_width;
  bool any_attribute = false;
};

LinkState read_link(const fs::path& dir) {
  LinkState s;
  auto speed = read_line(dir / "current_link_speed"), max_speed = read_line(dir / "max_link_speed");
  auto width = read_line(dir / "current_link_width"), max_width = read_line(dir / "max_link_width");
  s.any_attribute = speed || max_speed || width || max_width;
  if (speed) s.speed = parse_link_speed(*speed);
  if (max_speed) s.max_speed = parse_link_speed(*max_speed);
  auto number = [](const std::optional<std::string>& t) -> std::optional<int> {
    if (!t || t->empty()) return std::nullopt;
    try {
      int v = std::stoi(*t);
      return v > 0 && v <= 32 ? std::optional(v) : std::nullopt;  // x1..x32; 0 is a link down
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  s.width = number(width);
  s.max_width = number(max_width);
  return s;
}

std::string link_text(std::optional<int> width, std::optional<double> speed) {
  return fmt::format("x{} at {}", width ? std::to_string(*width) : "?",
                     speed ? fmt::format("{:.1f} GT/s (Gen{})", *speed, pcie_generation(*speed)) : "? GT/s");
}

double speed_of_generation(int gen) { return kPcieSpeeds[std::clamp(gen, 1, 6) - 1]; }

// One link against its maximum (the lower of the device's and the port above it, where
// that is known, since a Gen5 card in a Gen4 slot trains at Gen4 and is healthy), or against
// the cluster file's expectation for GPUs. A GPU lowers its link speed when idle to save
// power, so a GPU's slow link is a warning; a narrow link is a failure on every device.
// How a link's speed below its expectation is judged: a GPU lowers its own link's speed when
// idle to save power, so that is a warning while the GPU is idle (or its state unknown).
enum class SlowLink { Fails, WarnsWhileIdle };

std::optional<HealthFinding> check_link(const std::string& label, const fs::path& dir, bool of_gpu,
                                        SlowLink slow_link, bool must_have_link,
                                        const std::optional<LinkState>& above, const HealthExpectations& expect) {
  LinkState s = read_link(dir);
  if (!s.any_attribute) {
    if (!must_have_link) return std::nullopt;  // conventional PCI or a virtual device: no link
    HealthFinding f = finding("pcie_link", Status::Unknown, label, "no PCIe link attributes in sysfs");
    f.remedy = "read current_link_speed/width with a kernel that has them (4.13 or later), or lspci -vv";
    return f;
  }
  if (!s.speed || !s.max_speed || !s.width || !s.max_width) {
    HealthFinding f = finding("pcie_link", Status::Unknown, label,
                              fmt::format("link state unreadable ({})", link_text(s.width, s.speed)));
    f.remedy = "the link may be down: check the device with lspci -vv";
    return f;
  }
  double want_speed = *s.max_speed;
  int want_width = *s.max_width;
  std::string from = "the link's maximum";
  if (above && above->max_speed && above->max_width) {
    want_speed = std::min(want_speed, *above->max_speed);
    want_width = std::min(want_width, *above->max_width);
  }
  // What the link can train at, at best, does not change while the GPU idles: a slot or card
  // that cannot reach the expected generation or width fails whatever the GPU does.
  const double can_speed = want_speed;
  const int can_width = want_width;
  if (of_gpu && (expect.pcie_gen || expect.pcie_width)) {
    if (expect.pcie_gen) want_speed = speed_of_generation(*expect.pcie_gen);
    if (expect.pcie_width) want_width = *expect.pcie_width;
    const std::string gen_from = expect.from("pcie_gen"), width_from = expect.from("pcie_width");
    from = expect.pcie_gen && expect.pcie_width ? (gen_from == width_from ? gen_from : gen_from + " and " + width_from)
           : expect.pcie_gen                    ? gen_from
                                                : width_from;
  }
  HealthFinding f = finding("pcie_link", Status::Pass, label, "PCIe link " + link_text(s.width, s.speed));
  f.values = {{"pcie_link_width", double(*s.width)}, {"pcie_link_speed_gts", *s.speed}};
  const bool narrow = *s.width < want_width, slow = *s.speed + 0.01 < want_speed;
  const bool cannot = can_width < want_width || can_speed + 0.01 < want_speed;
  if (!narrow && !slow) return f;
  f.expected = link_text(want_width, want_speed);
  f.expected_from = from;
  if (narrow || cannot) {
    f.status = Status::Fail;
    f.remedy = cannot ? fmt::format("the link can reach only {} here: check the slot's BIOS setting, the riser "
                                    "and that the card sits in the slot the cluster file expects",
                                    link_text(can_width, can_speed))
                      : "reseat the card or its riser, check the slot and cable; a narrow link halves bandwidth";
  } else if (slow_link == SlowLink::WarnsWhileIdle) {
    f.status = Status::Warn;
    f.remedy = "GPUs lower their link speed when idle: check again under load (muster smoke); if it stays low, reseat";
  } else {
    f.status = Status::Fail;
    f.remedy = "reseat the card, check the slot's BIOS setting for its PCIe generation and the riser";
  }
  return f;
}

}  // namespace

std::optional<PcieLinkRate> link_at_best(const NodeReading& node, const PciDevice& device) {
  const LinkState own = read_link(device.dir);
  if (!own.max_speed || !own.max_width) return std::nullopt;
  PcieLinkRate best{*own.max_width, *own.max_speed};
  if (!device.upstream.empty()) {
    const LinkState above = read_link(node.root.at("/sys/bus/pci/devices") / device.upstream.front());
    if (above.max_speed && above.max_width) {
      best.width = std::min(best.width, *above.max_width);
      best.speed_gts = std::min(best.speed_gts, *above.max_speed);
    }
  }
  return best;
}

std::optional<PcieLinkRate> link_now(const PciDevice& device) {
  const LinkState now = read_link(device.dir);
  if (!now.speed || !now.width) return std::nullopt;
  return PcieLinkRate{*now.width, *now.speed};
}

void check_pcie(const NodeReading& node, NodeHealth& out) {
  const Root& root = node.root;
  const PciView& pci = node.pci;
  // The bus ids of GPUs NVML says are not idle, whose slow link is a failure.
  const std::set<std::string>& busy_gpus = node.busy_gpus;
  const HealthExpectations& expect = node.expect;
  if (!pci.listed) {
    HealthFinding f = finding("pcie_link", Status::Unknown, "", pci.why_not);
    f.remedy = "run where /sys is mounted, or give --fsroot a snapshot that has sys/bus/pci/devices";
    out.findings.push_back(f);
    return;
  }
  const fs::path devices = root.at("/sys/bus/pci/devices");
  std::set<std::string> links_done, aer_done;
  int links = 0;
  size_t first = out.findings.size();
  for (const auto& d : pci.devices) {
    // In sysfs a port's current_link_* is the link below it: the port just above a device
    // shows the device's own link, judged here with the device against the lower of both
    // ends' maxima (a Gen4 card in a Gen5 slot is healthy at Gen4).
    std::optional<LinkState> above;
    if (!d.upstream.empty()) above = read_link(devices / d.upstream.front());
    const bool must = d.role == Role::Gpu || d.label.find("mlx") != std::string::npos;
    const SlowLink slow = d.role == Role::Gpu && !busy_gpus.count(d.bus_id) ? SlowLink::WarnsWhileIdle
                                                                             : SlowLink::Fails;
    if (auto f = check_link(d.label, d.dir, d.role == Role::Gpu, slow, must, above, expect)) {
      ++links;
      if (f->status != Status::Pass) out.findings.push_back(*f);
    }
    // The links above: a switch's upstream port and the port above it share one link, so
    // every second port up the path is one link, judged once against both ends. A degraded
    // uplink slows every device below it while each device's own link looks fine.
    for (size_t k = 1; k < d.upstream.size(); k += 2) {
      const std::string& port = d.upstream[k];
      if (!links_done.insert(port).second) continue;
      std::optional<LinkState> other_end;
      if (k + 1 < d.upstream.size()) other_end = read_link(devices / d.upstream[k + 1]);
      const std::string label = fmt::format("bridge {} (above {})", port, d.label);
      if (auto f = check_link(label, devices / port, false, SlowLink::Fails, false, other_end, HealthExpectations{})) {
        ++links;
        if (f->status != Status::Pass) out.findings.push_back(*f);
      }
    }
    for (auto& f : check_aer(d.label, d.dir, *node.growing)) out.findings.push_back(f);
    for (const auto& port : d.upstream)
      if (aer_done.insert(port).second)
        for (auto& f : check_aer(fmt::format("bridge {} (above {})", port, d.label), devices / port, *node.growing))
          out.findings.push_back(f);
  }
  if (out.findings.size() == first) {
    HealthFinding f = finding("pcie_link", links ? Status::Pass : Status::Absent, "",
                              links ? fmt::format("{} PCIe link{} of GPUs, NICs and the bridges above them at "
                                                  "their expected width and speed, {}",
                                                  links, links == 1 ? "" : "s",
                                                  node.growing->baseline
                                                      ? "no new AER errors since " + node.growing->baseline_time()
                                                      : std::string("no AER errors"))
                                    : "no PCIe link of a GPU or NIC to check (conventional PCI or virtual devices)");
    f.values = {{"pcie_links_checked", double(links)}};
    out.findings.push_back(f);
  }
}

}  // namespace health
}  // namespace muster
