// The GPU stress tests as a family of health checks: measured through the node's GpuLibraries
// (the CUDA runtime and cuBLAS on a node, a recording fake in unit tests), then judged.
#include "topology/health/gpu_stress.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/median.h"
#include "topology/health/checks.h"

namespace muster {

namespace {

using health::Status;

std::string gbps_text(double gbps) { return fmt::format("{:.1f} GB/s", gbps); }
std::string tflops_text(double tflops) { return fmt::format("{:.1f} TFLOPS", tflops); }

// How one figure fared against its bars.
struct Judged {
  Status status = Status::Pass;
  std::string observed;   // "H2D 12.0 GB/s alone"
  std::string expected;   // "at least 35.0 GB/s"
  std::string from;       // "0.7x the median of its 7 peers, 50.1 GB/s (checks.stress_peer_ratio)"
};

// A bar: at least `floor`, for the reason `from`.
struct Bar {
  double floor;
  std::string from;
};

// The figure against the bars it has; unknown when it has none or was not measured.
Judged judge(const std::string& what, const StressFigure& figure, const std::vector<Bar>& bars,
             std::string (*unit_text)(double)) {
  Judged j;
  if (!figure.value) {
    j.status = Status::Unknown;
    j.observed = fmt::format("{} not measured: {}", what, figure.why_not);
    return j;
  }
  j.observed = fmt::format("{} {}", what, unit_text(*figure.value));
  if (bars.empty()) {
    j.status = Status::Unknown;
    j.observed += " (no peer of its kind and no hardware figure to compare it with)";
    return j;
  }
  for (const auto& bar : bars)
    if (*figure.value < bar.floor) {
      j.status = Status::Fail;
      j.expected = "at least " + unit_text(bar.floor);
      j.from = bar.from;
      break;
    }
  return j;
}

// The bar of its peers' median, if it has peers measured.
std::optional<Bar> peer_bar(const std::vector<double>& peer_values, const StressSettings& s, const char* unit) {
  if (peer_values.empty()) return std::nullopt;
  const double m = median(peer_values);
  return Bar{s.peer_ratio * m,
             fmt::format("{:g}x the median of its {} peer{}, {:.1f} {} (checks.stress_peer_ratio)", s.peer_ratio,
                         peer_values.size(), peer_values.size() == 1 ? "" : "s", m, unit)};
}

std::string throttle_text(std::uint64_t r) {
  std::vector<std::string> why;
  if (r & throttle::kSwPowerCap) why.push_back("power cap");
  if (r & throttle::kHwSlowdown) why.push_back("hardware slowdown");
  if (r & throttle::kSwThermalSlowdown) why.push_back("software thermal slowdown");
  if (r & throttle::kHwThermalSlowdown) why.push_back("hardware thermal slowdown");
  if (r & throttle::kHwPowerBrakeSlowdown) why.push_back("power brake");
  if (r & throttle::kApplicationsClocksSetting) why.push_back("application clocks set low");
  return fmt::format("{}", fmt::join(why, ", "));
}

// What NVML said right after the measurement that would slow a GPU: its clocks held down.
std::vector<std::string> clock_causes(const std::optional<GpuHealthReading>& g) {
  std::vector<std::string> causes;
  if (!g) return causes;
  if (g->throttle_reasons) {
    const std::string why = throttle_text(*g->throttle_reasons);
    if (!why.empty()) causes.push_back(fmt::format("clocks held down by {} (NVML, read then)", why));
  }
  if (g->sm_clock_mhz && g->max_sm_clock_mhz && *g->sm_clock_mhz * 10 < *g->max_sm_clock_mhz * 9)
    causes.push_back(fmt::format("SM clock {} MHz of its {} MHz", *g->sm_clock_mhz, *g->max_sm_clock_mhz));
  return causes;
}

std::optional<std::string> link_cause(const std::optional<StressLink>& l) {
  if (!l || (l->now.width >= l->best.width && l->now.speed_gts >= l->best.speed_gts)) return std::nullopt;
  return fmt::format("PCIe link at x{} {:g} GT/s, below its x{} {:g} GT/s", l->now.width, l->now.speed_gts,
                     l->best.width, l->best.speed_gts);
}

std::string remedy_of(const std::vector<std::string>& causes, const char* otherwise) {
  if (causes.empty()) return otherwise;
  return fmt::format("likely cause: {}; drain the node and fix that, then run --stress again", fmt::join(causes, "; "));
}

std::string label_of(const GpuStressFigures& g, const std::optional<GpuHealthReading>& nvml) {
  if (!nvml) return fmt::format("GPU{} {}", g.device, g.bus_id);
  return fmt::format("GPU{} {}{}{}", nvml->index, g.bus_id, nvml->name.empty() ? "" : " " + nvml->name,
                     nvml->uuid.empty() ? "" : " " + nvml->uuid);
}

std::string model_of(const std::optional<GpuHealthReading>& nvml) { return nvml ? nvml->name : ""; }

// One finding from the figures judged for it: the worst status; on failure, what failed.
HealthFinding combined(const char* check, const std::string& device, const std::string& model,
                       const std::vector<Judged>& judged, const std::string& remedy,
                       std::map<std::string, double> values) {
  HealthFinding f;
  f.check = check;
  f.gpu_model = model;
  f.device = device;
  f.values = std::move(values);
  f.status = Status::Pass;
  std::vector<std::string> observed, expected, from;
  for (const auto& j : judged)
    if (j.status == Status::Fail) f.status = Status::Fail;
    else if (j.status == Status::Unknown && f.status == Status::Pass) f.status = Status::Unknown;
  for (const auto& j : judged)
    if (f.status == Status::Pass || j.status == f.status) {
      observed.push_back(j.observed);
      if (!j.expected.empty()) expected.push_back(j.expected), from.push_back(j.from);
    }
  f.observed = fmt::format("{}", fmt::join(observed, "; "));
  f.expected = fmt::format("{}", fmt::join(expected, "; "));
  f.expected_from = fmt::format("{}", fmt::join(from, "; "));
  if (f.status == Status::Fail) f.remedy = remedy;
  if (f.status == Status::Unknown)
    f.remedy = "run muster health --stress where the CUDA runtime and cuBLAS load and the GPUs are free";
  return f;
}

// Figures are kept in the units an operator reads them in (GB/s, TFLOPS, MHz), named so in
// the key.
void add_value(std::map<std::string, double>& values, const StressFigureKey& key, const StressFigure& f) {
  if (f.value) values[key.key] = *f.value;
}

}  // namespace

std::string stress_figure_text(const char* what, const char* unit, double value) {
  return fmt::format("{} {:.1f} {}", what, value, unit);
}

double pcie_gbps(double speed_gts, int width) {
  const double encoding = speed_gts >= 8 ? 128.0 / 130.0 : 0.8;
  return speed_gts * encoding / 8 * width;
}

double nvlink_gbps(const std::string& name) {
  for (const char* blackwell : {"B100", "B200", "B300"})  // GB200 and GB300 among them
    if (name.find(blackwell) != std::string::npos) return 50;
  return 25;
}

std::vector<HealthFinding> judge_gpu_stress(const StressMeasurements& m, const StressContext& c) {
  std::vector<HealthFinding> out;
  const StressSettings& s = c.settings;
  const size_t n = m.gpus.size();
  auto nvml = [&](size_t i) -> std::optional<GpuHealthReading> { return i < c.nvml.size() ? c.nvml[i] : std::nullopt; };
  auto link = [&](size_t i) -> std::optional<StressLink> { return i < c.links.size() ? c.links[i] : std::nullopt; };
  // Peers: the other GPUs of its model with the figure measured.
  auto peers = [&](size_t i, StressFigure GpuStressFigures::*which) {
    std::vector<double> values;
    for (size_t k = 0; k < n; ++k)
      if (k != i && model_of(nvml(k)) == model_of(nvml(i)) && (m.gpus[k].*which).value)
        values.push_back(*(m.gpus[k].*which).value);
    return values;
  };
  auto bars = [&](size_t i, StressFigure GpuStressFigures::*which, const char* unit, bool by_link) {
    std::vector<Bar> out_bars;
    if (auto b = peer_bar(peers(i, which), s, unit)) out_bars.push_back(*b);
    if (by_link)
      if (auto l = link(i); l && l->best.width > 0 && l->best.speed_gts > 0) {
        const double rate = pcie_gbps(l->best.speed_gts, l->best.width);
        out_bars.push_back({s.hardware_ratio * rate,
                            fmt::format("{:g}x the {:.1f} GB/s of its PCIe link at its best, x{} {:g} GT/s "
                                        "(checks.stress_hardware_ratio)",
                                        s.hardware_ratio, rate, l->best.width, l->best.speed_gts)});
      }
    return out_bars;
  };

  for (size_t i = 0; i < n; ++i) {
    const GpuStressFigures& g = m.gpus[i];
    const std::string device = label_of(g, nvml(i));
    std::vector<std::string> causes = clock_causes(nvml(i));
    // Copies to and from the host.
    {
      std::vector<Judged> judged = {
          judge(kStressH2d.what, g.h2d, bars(i, &GpuStressFigures::h2d, "GB/s", true), gbps_text),
          judge(kStressD2h.what, g.d2h, bars(i, &GpuStressFigures::d2h, "GB/s", true), gbps_text),
          judge(fmt::format("H2D with all {} GPUs at once", n), g.h2d_all, bars(i, &GpuStressFigures::h2d_all, "GB/s", false),
                gbps_text),
          judge(fmt::format("D2H with all {} GPUs at once", n), g.d2h_all, bars(i, &GpuStressFigures::d2h_all, "GB/s", false),
                gbps_text)};
      std::vector<std::string> host_causes = causes;
      if (auto l = link_cause(link(i))) host_causes.insert(host_causes.begin(), *l);
      std::map<std::string, double> values;
      add_value(values, kStressH2d, g.h2d);
      add_value(values, kStressD2h, g.d2h);
      add_value(values, kStressH2dAll, g.h2d_all);
      add_value(values, kStressD2hAll, g.d2h_all);
      out.push_back(combined(kStressH2d.check, device, model_of(nvml(i)), judged,
                             remedy_of(host_causes, "no throttle reason nor degraded link was seen: reseat the GPU and "
                                                    "check its PCIe switch or riser; drain the node if it stays slow"),
                             std::move(values)));
    }
    {
      std::map<std::string, double> values;
      add_value(values, kStressHbm, g.hbm);
      out.push_back(combined(kStressHbm.check, device, model_of(nvml(i)),
                             {judge(kStressHbm.what, g.hbm, bars(i, &GpuStressFigures::hbm, "GB/s", false), gbps_text)},
                             remedy_of(causes, "no throttle reason was seen: its memory is slow; drain the node and "
                                               "have the GPU replaced if it stays slow"),
                             std::move(values)));
    }
    {
      std::map<std::string, double> values;
      add_value(values, kStressGemm, g.gemm);
      if (auto r = nvml(i)) {
        if (r->sm_clock_mhz) values["sm_clock_megahertz"] = *r->sm_clock_mhz;
        if (r->max_sm_clock_mhz) values["max_sm_clock_megahertz"] = *r->max_sm_clock_mhz;
        if (r->throttle_reasons) values["clocks_throttle_reasons"] = double(*r->throttle_reasons);
      }
      Judged j = judge(kStressGemm.what, g.gemm, bars(i, &GpuStressFigures::gemm, "TFLOPS", false), tflops_text);
      if (auto r = nvml(i); r && r->sm_clock_mhz && j.status != Status::Unknown)
        j.observed += fmt::format(" at an SM clock of {} MHz", *r->sm_clock_mhz);
      out.push_back(combined(kStressGemm.check, device, model_of(nvml(i)), {j},
                             remedy_of(causes, "no throttle reason was seen: check its cooling and power; drain the "
                                               "node if it stays slow"),
                             std::move(values)));
    }
  }

  // Copies between GPUs, one finding a pair, both ways judged. A pair's peers are the pairs
  // with as many NVLinks between them, of the same models.
  auto links_between = [&](size_t a, size_t b) -> std::optional<int> {
    if (a < c.nvlinks.size() && b < c.nvlinks[a].size()) return c.nvlinks[a][b];
    return std::nullopt;
  };
  auto same_kind = [&](const PeerStressFigure& p, const PeerStressFigure& q) {
    return links_between(p.from, p.to) == links_between(q.from, q.to) &&
           std::minmax(model_of(nvml(p.from)), model_of(nvml(p.to))) ==
               std::minmax(model_of(nvml(q.from)), model_of(nvml(q.to)));
  };
  auto find_peer = [&](size_t from, size_t to) -> const PeerStressFigure* {
    for (const auto& p : m.peers)
      if (p.from == from && p.to == to) return &p;
    return nullptr;
  };
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b) {
      std::vector<Judged> judged;
      std::map<std::string, double> values;
      std::vector<std::string> causes;
      for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
        const PeerStressFigure* p = find_peer(from, to);
        if (!p) continue;
        std::vector<double> others;
        for (const auto& q : m.peers)
          if (!((q.from == a && q.to == b) || (q.from == b && q.to == a)) && same_kind(*p, q) && q.gbps.value)
            others.push_back(*q.gbps.value);
        std::vector<Bar> pair_bars;
        if (auto bar = peer_bar(others, s, "GB/s")) pair_bars.push_back(*bar);
        const std::optional<int> links = links_between(from, to);
        if (links && *links > 0) {
          const double rate = *links * nvlink_gbps(model_of(nvml(from)));
          pair_bars.push_back({s.hardware_ratio * rate,
                               fmt::format("{:g}x the {:.0f} GB/s of its {} NVLink{} (checks.stress_hardware_ratio)",
                                           s.hardware_ratio, rate, *links, *links == 1 ? "" : "s")});
        }
        judged.push_back(judge(fmt::format("GPU{} to GPU{}{}", nvml(from) ? nvml(from)->index : unsigned(from),
                                           nvml(to) ? nvml(to)->index : unsigned(to),
                                           p->peer_access ? "" : " (no peer access: staged through the host)"),
                               p->gbps, pair_bars, gbps_text));
        add_value(values, from == a ? kStressPeerForward : kStressPeerBackward, p->gbps);
        if (links) values[kStressNvlinksKey] = *links;
      }
      for (size_t g : {a, b}) {
        if (auto r = nvml(g))
          for (const auto& l : r->nvlinks)
            if (!l.active) causes.push_back(fmt::format("NVLink {} of GPU{} is inactive", l.link, r->index));
        for (const auto& cause : clock_causes(nvml(g)))
          causes.push_back(fmt::format("GPU{}: {}", nvml(g) ? nvml(g)->index : unsigned(g), cause));
      }
      if (judged.empty()) continue;
      std::string model_a = model_of(nvml(a)), model_b = model_of(nvml(b));
      if (model_b < model_a) std::swap(model_a, model_b);
      out.push_back(combined(kStressPeerForward.check,
                             fmt::format("{} <-> {}", label_of(m.gpus[a], nvml(a)), label_of(m.gpus[b], nvml(b))),
                             model_a == model_b ? model_a : model_a + " + " + model_b, judged,
                             remedy_of(causes, "no inactive NVLink nor throttle reason was seen: check the NVLink "
                                               "fabric (nvidia-smi nvlink -s, the NVSwitches); drain the node if it "
                                               "stays slow"),
                             std::move(values)));
    }
  return out;
}

namespace health {

void check_gpu_stress(const NodeReading& node, NodeHealth& out) {
  const StressSettings& settings = node.expect.stress;
  if (!settings.run) return;
  if (!node.sources.gpus) {
    HealthFinding f = finding("gpu_stress", Status::Unknown, "", "not measured: " + node.sources.why_no_gpu_libraries);
    f.remedy = "run muster health --stress on the node itself";
    out.findings.push_back(std::move(f));
    return;
  }
  std::string why_not;
  const std::optional<StressMeasurements> measured = node.sources.gpus->measure_stress(kStressBudget, why_not);
  if (!measured) {
    const bool no_gpu = node.pci.listed && node.pci.nvidia_gpus.empty();
    HealthFinding f = finding("gpu_stress", no_gpu ? Status::Absent : Status::Unknown, "",
                              no_gpu ? "no NVIDIA GPU on the PCI bus to measure" : "not measured: " + why_not);
    if (!no_gpu) f.remedy = "install the CUDA runtime and cuBLAS where a job finds them (module load cuda)";
    out.findings.push_back(std::move(f));
    return;
  }
  // The GPUs as the node's NVML reading names them (index, name, UUID, NVLinks up), with
  // what would slow them read once more right after the GEMMs: their clocks then, and the
  // NVLinks between each pair.
  StressContext context;
  context.settings = settings;
  std::vector<std::string> bus_ids;
  for (const auto& g : measured->gpus) bus_ids.push_back(g.bus_id);
  std::string why_not_after;
  const std::optional<NvmlAfterStress> after = node.sources.gpus->read_after_stress(bus_ids, why_not_after);
  for (size_t i = 0; i < measured->gpus.size(); ++i) {
    const GpuStressFigures& g = measured->gpus[i];
    std::optional<GpuHealthReading> reading;
    if (node.nvml)
      for (const auto& r : node.nvml->gpus)
        if (r.bus_id == g.bus_id && r.error.empty()) reading = r;
    if (reading) {
      // The clocks before the load say nothing of it: only those read after it are judged.
      const std::optional<GpuClocksReading> clocks =
          after && i < after->clocks.size() ? after->clocks[i] : std::nullopt;
      reading->throttle_reasons = clocks ? clocks->throttle_reasons : std::nullopt;
      reading->sm_clock_mhz = clocks ? clocks->sm_clock_mhz : std::nullopt;
      reading->max_sm_clock_mhz = clocks ? clocks->max_sm_clock_mhz : std::nullopt;
    }
    context.nvml.push_back(reading);
    std::optional<StressLink> link;
    for (const auto& d : node.pci.devices)
      if (d.bus_id == g.bus_id) {
        auto best = link_at_best(node, d);
        auto now = link_now(d);
        if (best && now) link = StressLink{*now, *best};
      }
    context.links.push_back(link);
  }
  if (after) context.nvlinks = after->nvlinks;
  for (auto& f : judge_gpu_stress(*measured, context)) out.findings.push_back(std::move(f));
  HealthFinding summary = finding("gpu_stress", Status::Pass, "",
                                  fmt::format("{} GPU{} and {} copies between them measured in {:.1f} s (budget {:g} s)",
                                              measured->gpus.size(), measured->gpus.size() == 1 ? "" : "s",
                                              measured->peers.size(), measured->seconds,
                                              kStressBudget.count() / 1e3));
  summary.values["seconds"] = measured->seconds;
  out.findings.push_back(std::move(summary));
}

}  // namespace health

}  // namespace muster
