// InfiniBand and RoCE ports: state, physical state and rate, against the node's other ports
// of their kind or the cluster file's expectations; their error counters for the end-of-run
// comparison.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "topology/health/checks.h"

namespace muster {

std::optional<double> parse_ib_rate(const std::string& text) {
  // "200 Gb/sec (4X HDR)", "25 Gb/sec (1X EDR)", "2.5 Gb/sec (1X SDR)".
  return health::number_in(text, "Gb/sec");
}

namespace health {

namespace {

// The error counters whose growth means a failing link. port_xmit_discards is left out:
// it grows under ordinary congestion on a healthy fabric.
const char* const kIbCounters[] = {"symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
                                   "local_link_integrity_errors", "excessive_buffer_overrun_errors",
                                   "port_rcv_remote_physical_errors"};

struct IbPort {
  std::string name;   // "mlx5_0 port 1"
  std::string label;  // "mlx5_0 port 1 (0000:3b:00.0)"
  std::string kind;   // link layer and HCA type: ports of one kind are compared with each other
  fs::path dir;
  std::optional<std::string> state, phys_state, rate_text, link_layer;
  std::optional<double> rate;
  bool active() const { return state && state->find("ACTIVE") != std::string::npos; }
  bool link_up() const { return phys_state && phys_state->find("LinkUp") != std::string::npos; }
  // Turned off by an administrator ("3: Disabled"): not in use, not broken.
  bool disabled() const { return phys_state && phys_state->find("Disabled") != std::string::npos; }
  bool infiniband() const { return link_layer.value_or("InfiniBand") == "InfiniBand"; }
};

std::vector<IbPort> read_ib_ports(const Root& root) {
  std::vector<IbPort> ports;
  const fs::path dir = root.at("/sys/class/infiniband");
  for (const auto& dev : list_dir(dir).value_or(std::vector<std::string>{})) {
    const std::string bus = pci_function_of(dir / dev);
    const std::string hca_type = read_line(dir / dev / "hca_type").value_or("");
    for (const auto& port : list_dir(dir / dev / "ports").value_or(std::vector<std::string>{})) {
      IbPort p;
      p.dir = dir / dev / "ports" / port;
      p.name = fmt::format("{} port {}", dev, port);
      p.label = p.name + (bus.empty() ? "" : " (" + bus + ")");
      p.state = read_line(p.dir / "state");
      p.phys_state = read_line(p.dir / "phys_state");
      p.rate_text = read_line(p.dir / "rate");
      p.link_layer = read_line(p.dir / "link_layer");
      p.kind = p.link_layer.value_or("") + "/" + hca_type;
      if (p.rate_text) p.rate = parse_ib_rate(*p.rate_text);
      ports.push_back(std::move(p));
    }
  }
  return ports;
}

// The rate most of these ports run at (the highest among equals).
std::optional<double> usual_rate(const std::vector<double>& rates) {
  std::map<double, int> times;
  for (double r : rates) ++times[r];
  std::optional<double> best;
  int best_times = 0;
  for (auto [rate, n] : times)
    if (n >= best_times) best = rate, best_times = n;
  return best;
}

// The port's error counters, kept in `counters` for doctor's growth during its run, and judged
// by what is new since this boot's baseline, as AER counts and Xids are: a symbol error months
// ago is no reason to drain a node today. A link that went down since the baseline
// (link_downed grew) flapped and fails; counted since boot it may be the boot's own link
// training, or a cable reseated since, and warns with the rest.
std::optional<HealthFinding> judge_error_counters(const IbPort& p, GrowingCounters& growing,
                                                  std::vector<HealthCounter>& counters) {
  std::vector<std::string> grown;
  bool flapped = false, all_since_baseline = true;
  for (const char* name : kIbCounters) {
    auto v = read_count(p.dir / "counters" / name);
    if (!v) continue;
    counters.push_back({p.label, name, *v});
    const std::string key = fmt::format("ib/{}/{}/{}", p.dir.parent_path().parent_path().filename().string(),
                                        p.dir.filename().string(), name);
    const std::uint64_t judged = growing.judged(key, *v);
    if (judged == 0) continue;
    const bool since_baseline = growing.since_baseline(key);
    all_since_baseline &= since_baseline;
    grown.push_back(fmt::format("{} +{}", name, judged));
    if (std::string_view(name) == "link_downed" && since_baseline) {
      flapped = true;
      growing.failed.insert(key);
    }
  }
  if (grown.empty()) return std::nullopt;
  HealthFinding f = finding("ib_errors", flapped ? Status::Fail : Status::Warn, p.label,
                            fmt::format("error counters {}: {}",
                                        all_since_baseline ? "since " + growing.baseline_time() : "since boot",
                                        fmt::join(grown, ", ")));
  f.expected = "0";
  f.expected_from = all_since_baseline ? "the baseline accepted at " + growing.baseline_time() : "a healthy link";
  f.remedy = flapped ? "the link went down and came back: check the cable, transceiver and switch port (mlxlink); "
                       "once repaired, muster health --accept-counters"
                     : "a few are normal; a growing count points at the cable or transceiver (mlxlink, ibqueryerrors)";
  return f;
}

}  // namespace

void check_ib(const NodeReading& node, NodeHealth& out) {
  const Root& root = node.root;
  const HealthExpectations& expect = node.expect;
  std::vector<IbPort> ports = read_ib_ports(root);
  const size_t first = out.findings.size();
  int active = 0;
  for (const auto& p : ports) active += p.active() && p.link_up();
  out.software.ib_ports = active;
  // Too few ports active, after the ports themselves: a port down names the device first (what
  // a drain's reason says); an HCA missing has no port to name.
  auto count_against_expectation = [&] {
    if (!expect.ib_ports || active >= *expect.ib_ports) return;
    HealthFinding f = finding("ib_port", Status::Fail, "", fmt::format("{} active InfiniBand/RoCE port{}", active,
                                                                        active == 1 ? "" : "s"));
    f.expected = std::to_string(*expect.ib_ports);
    f.expected_from = expect.from("ib_ports");
    f.remedy = "a port is down or an HCA is missing: check the cables, ibstat, and lspci for the HCAs";
    out.findings.push_back(f);
  };
  if (ports.empty()) {
    count_against_expectation();
    if (out.findings.size() == first)
      out.findings.push_back(finding("ib_port", Status::Absent, "", "no InfiniBand or RoCE device in /sys/class/infiniband"));
    return;
  }
  // A port is compared with the node's other ports of its kind (link layer and HCA type): a
  // node's 400G compute HCAs and its 100G storage or RoCE ports are all healthy.
  std::map<std::string, std::vector<double>> active_rates;
  for (const auto& p : ports)
    if (p.rate && p.active()) active_rates[p.kind].push_back(*p.rate);
  // With expect.ib_ports met, a port that is down is one not cabled (the second port of a
  // dual-port card); with it unmet, a port down is one that should be up. Without it nothing
  // here says which: a warning, which a record (--record) or the node's peers (doctor) turn
  // into a failure.
  const bool enough_active = expect.ib_ports && active >= *expect.ib_ports;
  const bool too_few_active = expect.ib_ports && active < *expect.ib_ports;
  std::map<std::string, int> rate_counts;
  std::vector<HealthFinding> counted;  // error counts, a check of their own after the ports'
  for (const auto& p : ports) {
    if (auto f = judge_error_counters(p, *node.growing, out.counters)) counted.push_back(std::move(*f));
    if (!p.state || !p.phys_state) {
      HealthFinding f = finding("ib_port", Status::Unknown, p.label, "state or phys_state unreadable");
      f.remedy = "check the port with ibstat";
      out.findings.push_back(f);
      continue;
    }
    // A port down is never silent: the commonest InfiniBand fault. It is named with its
    // states, and fails where something says it should be up: too few ports active for
    // expect.ib_ports, or ACTIVE in this node's record. One that is disabled ("3: Disabled":
    // by an administrator, or after it went down) is a warning all the same.
    if (!p.active() || !p.link_up()) {
      HealthFinding f = finding("ib_port", too_few_active && !p.disabled() ? Status::Fail : Status::Warn, p.label,
                                fmt::format("state {}, phys_state {}{}", *p.state, *p.phys_state,
                                            p.rate_text ? ", rate " + *p.rate_text : ""));
      f.expected = "4: ACTIVE, 5: LinkUp";
      f.expected_from = enough_active    ? "a port in use (expect.ib_ports are active: this one may not be cabled)"
                        : too_few_active ? "a port in use (" + expect.from("ib_ports") + " are not all active)"
                                         : "a port in use, if it is cabled: expect.ib_ports or a record (--record) "
                                           "says how many are; doctor compares the node's peers";
      f.remedy = p.disabled() ? "the port is disabled: if it should carry traffic, enable it (ibportstate) and check "
                                "its cable; if it is unused, expect.ib_ports says how many ports are"
                 : !p.link_up() ? "no physical link: check the cable, the transceiver and the switch port (ibstat, mlxlink)"
                              : "the link is up but not active: is the subnet manager running and does it see this port?";
      // A port this node had ACTIVE when it was recorded is one in use: down, it fails.
      if (std::find(expect.active_ib_ports.begin(), expect.active_ib_ports.end(), p.name) !=
          expect.active_ib_ports.end()) {
        f.status = Status::Fail;
        f.expected_from = "ACTIVE in this node's record of " + expect.recorded_at;
      }
      out.findings.push_back(f);
      continue;
    }
    if (p.rate) ++rate_counts[fmt::format("{:g} Gb/sec", *p.rate)];
    const bool expected_rate = expect.ib_rate_gbps && p.infiniband();
    const std::optional<double> want = expected_rate ? expect.ib_rate_gbps : usual_rate(active_rates[p.kind]);
    if (!p.rate) {
      HealthFinding f = finding("ib_port", Status::Unknown, p.label, "rate unreadable: " + p.rate_text.value_or("missing"));
      out.findings.push_back(f);
    } else if (want && *p.rate + 0.01 < *want) {
      HealthFinding f = finding("ib_port", Status::Fail, p.label, "active at " + *p.rate_text);
      f.expected = fmt::format("{:g} Gb/sec", *want);
      f.expected_from = expected_rate ? expect.from("ib_rate_gbps") : "most ports of its kind on this node";
      f.remedy = "the link trained below its rate: reseat or replace the cable or transceiver, check the switch port";
      f.values = {{"ib_rate_gbps", *p.rate}};
      out.findings.push_back(f);
    }
  }
  count_against_expectation();
  std::vector<std::string> rates;
  for (const auto& [rate, n] : rate_counts) rates.push_back(fmt::format("{} x {}", n, rate));
  out.software.ib_rates = fmt::format("{}", fmt::join(rates, ", "));
  if (out.findings.size() == first)
    out.findings.push_back(finding("ib_port", Status::Pass, "",
                                   fmt::format("{} port{} ACTIVE and LinkUp ({}){}", active, active == 1 ? "" : "s",
                                               out.software.ib_rates,
                                               !counted.empty()        ? ""
                                               : node.growing->baseline ? ", no error counts new since " +
                                                                              node.growing->baseline_time()
                                                                        : ", no error counts since boot")));
  out.findings.insert(out.findings.end(), counted.begin(), counted.end());
}

ActivePorts active_ib_ports(const Root& root) {
  ActivePorts out;
  std::set<double> ib_rates;
  for (const auto& p : read_ib_ports(root)) {
    if (!p.active() || !p.link_up()) continue;
    out.names.push_back(p.name);
    if (p.infiniband()) ib_rates.insert(p.rate.value_or(0));
  }
  if (ib_rates.size() == 1 && *ib_rates.begin() > 0) out.common_ib_rate = *ib_rates.begin();
  return out;
}

void read_ib_counters(const Root& root, std::vector<HealthCounter>& out) {
  for (const auto& p : read_ib_ports(root))
    for (const char* name : kIbCounters)
      if (auto v = read_count(p.dir / "counters" / name)) out.push_back({p.label, name, *v});
}

}  // namespace health
}  // namespace muster
