#include "topology/health/health.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/thread.h"
#include "topology/nvml.h"
#include "topology/sysfs_pci.h"

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

namespace {

// A positive number followed by `unit` and anything ("16.0 GT/s PCIe", "200 Gb/sec (4X HDR)").
std::optional<double> number_in(const std::string& text, const char* unit) {
  double value = 0;
  char found[8] = {};
  if (std::sscanf(text.c_str(), "%lf %7s", &value, found) != 2 || std::strcmp(found, unit) != 0 || value <= 0)
    return std::nullopt;
  return value;
}

// Each PCIe generation's transfer rate, Gen1 first.
constexpr double kPcieSpeeds[] = {2.5, 5, 8, 16, 32, 64};

}  // namespace

std::optional<double> parse_link_speed(const std::string& text) {
  // "16.0 GT/s PCIe" (kernels since 4.13), "8 GT/s" (older), "Unknown" on a link that is
  // down or a kernel that cannot tell.
  return number_in(text, "GT/s");
}

int pcie_generation(double gts) {
  for (int g = 6; g >= 1; --g)
    if (gts >= kPcieSpeeds[g - 1] - 0.01) return g;
  return 0;
}

std::optional<double> parse_ib_rate(const std::string& text) {
  // "200 Gb/sec (4X HDR)", "25 Gb/sec (1X EDR)", "2.5 Gb/sec (1X SDR)".
  return number_in(text, "Gb/sec");
}

std::vector<XidEvent> find_xids(const std::string& log) {
  // "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus."
  std::vector<XidEvent> out;
  const std::string marker = "NVRM: Xid (PCI:";
  for (size_t at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) {
    const size_t line_end = std::min(log.find('\n', at), log.size());
    const std::string line = log.substr(at, line_end - at);
    unsigned domain = 0, bus = 0, device = 0;
    int xid = 0;
    if (std::sscanf(line.c_str() + marker.size(), "%x:%x:%x): %d", &domain, &bus, &device, &xid) != 4) continue;
    out.push_back({fmt::format("{:04x}:{:02x}:{:02x}.0", domain, bus, device), xid, line});
    if (out.size() >= 10000) break;  // bounded: a GPU that logs an Xid a second for days
  }
  return out;
}

bool xid_is_fatal(int xid, const std::string& text) {
  // From NVIDIA's Xid catalog: double-bit ECC (48), internal micro-controller faults (61,
  // 62), row remapping or page retirement failures (64), NVLink errors (74), fallen off the
  // bus (79), high single-bit ECC rate (92), contained and uncontained ECC errors (94, 95),
  // GSP errors (119, 120), unrecovered ECC (140). 63 records a remap or retirement, a
  // failure only when it says so.
  static const std::set<int> fatal = {48, 61, 62, 64, 74, 79, 92, 94, 95, 119, 120, 140};
  if (fatal.count(xid)) return true;
  if (xid == 63) {
    std::string lower = text;
    for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    return lower.find("fail") != std::string::npos;
  }
  return false;
}

namespace {

namespace fs = std::filesystem;

using Status = HealthStatus;

// A path of the node's, read under the root the checks were given.
struct Root {
  std::string dir;
  fs::path at(const std::string& absolute) const {
    return dir.empty() || dir == "/" ? fs::path(absolute) : fs::path(dir) / absolute.substr(1);
  }
};

// The first line of a small attribute file, at most 4 KiB of it: sysfs bounds what it
// writes, a snapshot's files need not.
std::optional<std::string> read_line(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  char buffer[4096];
  in.read(buffer, sizeof buffer);
  std::string line(buffer, size_t(in.gcount()));
  line = line.substr(0, line.find('\n'));
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

std::optional<unsigned long> read_hex(const fs::path& path) {
  auto text = read_line(path);
  if (!text || text->empty()) return std::nullopt;
  char* end = nullptr;
  unsigned long v = std::strtoul(text->c_str(), &end, 16);
  return end && *end == '\0' ? std::optional(v) : std::nullopt;
}

std::optional<std::uint64_t> read_count(const fs::path& path) {
  auto text = read_line(path);
  if (!text || text->empty()) return std::nullopt;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text->c_str(), &end, 10);
  return end && *end == '\0' ? std::optional<std::uint64_t>(v) : std::nullopt;
}

// The entries of a directory, sorted; nullopt when it cannot be listed.
std::optional<std::vector<std::string>> list_dir(const fs::path& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return std::nullopt;
  std::vector<std::string> names;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    names.push_back(it->path().filename().string());
    if (names.size() > 65536) break;  // bounded, whatever the snapshot holds
  }
  if (ec) return std::nullopt;  // a listing cut short tells nothing whole
  std::sort(names.begin(), names.end());
  return names;
}

// The PCI function a class entry's `device` link points at ("0000:3b:00.0"), or "".
std::string pci_function_of(const fs::path& class_entry) {
  std::error_code ec;
  fs::path target = fs::read_symlink(class_entry / "device", ec);
  if (ec) return "";
  std::string name = target.filename().string();
  return name.size() >= 12 && name[4] == ':' ? name : "";
}

bool looks_like_bus_id(const std::string& name) {
  unsigned d = 0, b = 0, dev = 0, f = 0;
  char tail = 0;
  return std::sscanf(name.c_str(), "%x:%x:%x.%x%c", &d, &b, &dev, &f, &tail) == 4 && name.size() >= 12;
}

HealthFinding finding(std::string check, Status status, std::string device, std::string observed) {
  HealthFinding f;
  f.check = std::move(check);
  f.status = status;
  f.device = std::move(device);
  f.observed = std::move(observed);
  return f;
}

// ---- PCI devices ------------------------------------------------------------------------

enum class Role { Gpu, Nic };

struct PciDevice {
  std::string bus_id;
  Role role = Role::Nic;
  std::string label;             // "GPU0 0000:18:00.0", "mlx5_0 0000:3b:00.0", "bridge 0000:00:01.0"
  fs::path dir;                  // the device's directory (the link resolved where it is one)
  std::vector<std::string> upstream;  // bus ids of the bridges above it, nearest first
  bool nvidia_gpu = false;
};

struct PciView {
  bool listed = false;
  std::string why_not;
  std::vector<PciDevice> devices;  // GPUs and NICs, in bus id order
  std::vector<std::string> nvidia_gpus;  // bus ids
};

// The names each PCI function has in SYS/class/CLASS ("mlx5_0", "eth0").
std::map<std::string, std::vector<std::string>> class_names(const Root& root, const std::string& cls) {
  std::map<std::string, std::vector<std::string>> out;
  const fs::path dir = root.at("/sys/class/" + cls);
  for (const auto& name : list_dir(dir).value_or(std::vector<std::string>{})) {
    std::string bus = pci_function_of(dir / name);
    if (!bus.empty()) out[bus].push_back(name);
  }
  return out;
}

// `gpu_names`: NVML's name for each GPU's bus id, where NVML answered.
PciView read_pci(const Root& root, const std::map<std::string, std::string>& gpu_names) {
  PciView view;
  const fs::path devices = root.at("/sys/bus/pci/devices");
  auto names = list_dir(devices);
  if (!names) {
    view.why_not = fmt::format("cannot list {}", devices.string());
    return view;
  }
  view.listed = true;
  auto ib = class_names(root, "infiniband"), net = class_names(root, "net");
  int gpu_index = 0;
  for (const auto& bus_id : *names) {
    if (!looks_like_bus_id(bus_id)) continue;
    const fs::path entry = devices / bus_id;
    auto cls = read_hex(entry / "class"), vendor = read_hex(entry / "vendor");
    if (!cls || !vendor) continue;
    // An SR-IOV virtual function has no link of its own (its link registers read zero); its
    // physical function's link is the one checked.
    std::error_code vf;
    if (fs::is_symlink(entry / "physfn", vf)) continue;
    PciDevice d;
    d.bus_id = bus_id;
    unsigned bus = 0, domain = 0;
    std::sscanf(bus_id.c_str(), "%x:%x", &domain, &bus);
    // A snapshot may lack the device id: read as 0, which no old ATI chip has, a GPU vendor's
    // display still counts.
    const auto device = read_hex(entry / "device").value_or(0);
    const bool gpu = gpu_vendor_of(unsigned(*cls >> 8), std::uint16_t(*vendor), std::uint16_t(device),
                                   bus) != nullptr;
    const bool nic = (*cls >> 16) == 0x02 || ib.count(bus_id);
    if (!gpu && !nic) continue;
    d.role = gpu ? Role::Gpu : Role::Nic;
    d.nvidia_gpu = gpu && *vendor == 0x10de;
    if (d.nvidia_gpu) view.nvidia_gpus.push_back(bus_id);
    if (gpu) {
      auto name = gpu_names.find(bus_id);
      d.label = fmt::format("GPU{} {}{}", gpu_index++, bus_id, name == gpu_names.end() ? "" : " " + name->second);
    }
    else {
      std::vector<std::string> named = ib.count(bus_id) ? ib[bus_id] : net[bus_id];
      d.label = named.empty() ? fmt::format("NIC {}", bus_id) : fmt::format("{} {}", fmt::join(named, "/"), bus_id);
    }
    // In the kernel's sysfs the entry is a link into the device tree, whose directories are
    // the bridges above it; a snapshot may hold plain directories, which name no bridge.
    std::error_code ec;
    d.dir = fs::canonical(entry, ec);
    if (ec) d.dir = entry;
    for (fs::path p = d.dir.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
      const std::string name = p.filename().string();
      if (looks_like_bus_id(name)) d.upstream.push_back(name);
      else if (name.rfind("pci", 0) == 0 || name == "devices") break;
    }
    view.devices.push_back(std::move(d));
  }
  return view;
}

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
    from = expect.pcie_gen && expect.pcie_width ? "expect.pcie_gen and expect.pcie_width"
           : expect.pcie_gen                    ? "expect.pcie_gen"
                                                : "expect.pcie_width";
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

std::vector<HealthFinding> check_aer(const std::string& label, const fs::path& dir) {
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
    if (!total || *total == 0) continue;
    HealthFinding f = finding("pcie_aer", k.status, label, fmt::format("{} {} PCIe errors (AER) since boot", *total, k.what));
    f.expected = "0";
    f.expected_from = "a healthy link";
    f.remedy = k.status == Status::Fail ? "the device or its slot is failing: drain the node, reseat or replace the card"
                                        : "a few are normal; a growing count points at the slot, riser or card";
    f.values = {{std::string("pcie_aer_") + k.file + "_total", double(*total)}};
    out.push_back(f);
  }
  return out;
}

// `busy_gpus`: the bus ids of GPUs NVML says are not idle, whose slow link is a failure.
void check_pcie(const Root& root, const PciView& pci, const std::set<std::string>& busy_gpus,
                const HealthExpectations& expect, NodeHealth& out) {
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
    for (auto& f : check_aer(d.label, d.dir)) out.findings.push_back(f);
    for (const auto& port : d.upstream)
      if (aer_done.insert(port).second)
        for (auto& f : check_aer(fmt::format("bridge {} (above {})", port, d.label), devices / port))
          out.findings.push_back(f);
  }
  if (out.findings.size() == first) {
    HealthFinding f = finding("pcie_link", links ? Status::Pass : Status::Absent, "",
                              links ? fmt::format("{} PCIe link{} of GPUs, NICs and the bridges above them at "
                                                  "their expected width and speed, no AER errors",
                                                  links, links == 1 ? "" : "s")
                                    : "no PCIe link of a GPU or NIC to check (conventional PCI or virtual devices)");
    f.values = {{"pcie_links_checked", double(links)}};
    out.findings.push_back(f);
  }
}

// ---- InfiniBand and RoCE ports, Ethernet carriers -----------------------------------------

// The error counters whose growth means a failing link. port_xmit_discards is left out:
// it grows under ordinary congestion on a healthy fabric.
const char* const kIbCounters[] = {"symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
                                   "local_link_integrity_errors", "excessive_buffer_overrun_errors",
                                   "port_rcv_remote_physical_errors"};

struct IbPort {
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
      p.label = fmt::format("{} port {}{}", dev, port, bus.empty() ? "" : " (" + bus + ")");
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

void check_ib(const Root& root, const HealthExpectations& expect, NodeHealth& out) {
  std::vector<IbPort> ports = read_ib_ports(root);
  const size_t first = out.findings.size();
  int active = 0;
  for (const auto& p : ports) active += p.active() && p.link_up();
  out.software.ib_ports = active;
  if (expect.ib_ports && active < *expect.ib_ports) {
    HealthFinding f = finding("ib_port", Status::Fail, "", fmt::format("{} active InfiniBand/RoCE port{}", active,
                                                                        active == 1 ? "" : "s"));
    f.expected = std::to_string(*expect.ib_ports);
    f.expected_from = "expect.ib_ports";
    f.remedy = "a port is down or an HCA is missing: check the cables, ibstat, and lspci for the HCAs";
    out.findings.push_back(f);
  }
  if (ports.empty()) {
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
  // dual-port card); without it, a port down is a port that should be up.
  const bool enough_active = expect.ib_ports && active >= *expect.ib_ports;
  std::map<std::string, int> rate_counts;
  for (const auto& p : ports) {
    for (const char* name : kIbCounters)
      if (auto v = read_count(p.dir / "counters" / name)) out.counters.push_back({p.label, name, *v});
    if (!p.state || !p.phys_state) {
      HealthFinding f = finding("ib_port", Status::Unknown, p.label, "state or phys_state unreadable");
      f.remedy = "check the port with ibstat";
      out.findings.push_back(f);
      continue;
    }
    // A port down is never silent: the commonest InfiniBand fault. One that is disabled
    // ("3: Disabled": by an administrator, or after it went down) is a warning, named with its
    // states; one down while still in use fails, unless the expected ports are active.
    if (!p.active() || !p.link_up()) {
      HealthFinding f = finding("ib_port", enough_active || p.disabled() ? Status::Warn : Status::Fail, p.label,
                                fmt::format("state {}, phys_state {}{}", *p.state, *p.phys_state,
                                            p.rate_text ? ", rate " + *p.rate_text : ""));
      f.expected = "4: ACTIVE, 5: LinkUp";
      f.expected_from = enough_active ? "a port in use (expect.ib_ports are active: this one may not be cabled)"
                                      : "a port in use";
      f.remedy = p.disabled() ? "the port is disabled: if it should carry traffic, enable it (ibportstate) and check "
                                "its cable; if it is unused, expect.ib_ports says how many ports are"
                 : !p.link_up() ? "no physical link: check the cable, the transceiver and the switch port (ibstat, mlxlink)"
                              : "the link is up but not active: is the subnet manager running and does it see this port?";
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
      f.expected_from = expected_rate ? "expect.ib_rate_gbps" : "most ports of its kind on this node";
      f.remedy = "the link trained below its rate: reseat or replace the cable or transceiver, check the switch port";
      f.values = {{"ib_rate_gbps", *p.rate}};
      out.findings.push_back(f);
    }
  }
  std::vector<std::string> rates;
  for (const auto& [rate, n] : rate_counts) rates.push_back(fmt::format("{} x {}", n, rate));
  out.software.ib_rates = fmt::format("{}", fmt::join(rates, ", "));
  if (out.findings.size() == first)
    out.findings.push_back(finding("ib_port", Status::Pass, "",
                                   fmt::format("{} port{} ACTIVE and LinkUp ({})", active, active == 1 ? "" : "s",
                                               out.software.ib_rates)));
}

// Physical interfaces only: a veth or a bridge has no `device` link.
void read_carriers(const Root& root, std::vector<HealthCounter>& out) {
  const fs::path dir = root.at("/sys/class/net");
  for (const auto& name : list_dir(dir).value_or(std::vector<std::string>{})) {
    if (pci_function_of(dir / name).empty()) continue;
    if (auto v = read_count(dir / name / "carrier_changes")) out.push_back({name, "carrier_changes", *v});
  }
}

// ---- GPUs, through NVML ---------------------------------------------------------------

std::string gpu_label(const GpuHealthReading& g) {
  return fmt::format("GPU{} {}{}", g.index, g.bus_id.empty() ? "?" : g.bus_id, g.name.empty() ? "" : " " + g.name);
}

void check_gpus(const PciView& pci, const std::optional<NvmlHealthReading>& nvml, const std::string& why_not,
                const HealthExpectations& expect, NodeHealth& out) {
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
      f.expected_from = "expect.gpus_per_node";
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
      add(g, "gpu_model", Status::Fail, "model " + g.name, "'" + *expect.gpu_model + "'", "expect.gpu_model",
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

// ---- the kernel log -------------------------------------------------------------------

// The kernel log since boot: /dev/kmsg's records on a live node (one per read, until none
// is left), or the file at ROOT/dev/kmsg in a snapshot (records or dmesg lines). Bounded.
std::optional<std::string> read_kernel_log(const Root& root, std::string& why_not) {
  const fs::path path = root.at("/dev/kmsg");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    why_not = fmt::format("cannot read the kernel log {}: {}", path.string(), std::strerror(error));
    if (error == EPERM || error == EACCES)
      why_not += " (kernel.dmesg_restrict is set: run as root or with CAP_SYSLOG)";
    return std::nullopt;
  }
  // /dev/kmsg gives one record a read; a snapshot's plain file gives whatever fits, and a
  // line cut between two reads must not be split.
  struct stat st{};
  const bool records = fstat(fd, &st) == 0 && S_ISCHR(st.st_mode);
  std::string log;
  char record[8192];
  constexpr size_t kLimit = 32 << 20;
  while (log.size() < kLimit) {
    ssize_t n = ::read(fd, record, sizeof record);
    if (n > 0) {
      log.append(record, size_t(n));
      if (records && log.back() != '\n') log += '\n';
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EPIPE) continue;  // records overwritten while reading: go on
    break;  // EAGAIN: no more records; 0: the end of a snapshot's file
  }
  ::close(fd);
  return log;
}

void check_xids(const Root& root, const PciView& pci, NodeHealth& out) {
  std::string why_not;
  auto log = read_kernel_log(root, why_not);
  if (!log) {
    HealthFinding f = finding("xid", Status::Unknown, "", why_not);
    f.remedy = "read dmesg as root for 'NVRM: Xid' lines";
    out.findings.push_back(f);
    return;
  }
  std::map<std::string, std::map<int, int>> by_gpu;  // bus id -> xid -> times
  std::map<std::string, bool> fatal;
  for (const auto& x : find_xids(*log)) {
    ++by_gpu[x.bus_id][x.xid];
    fatal[x.bus_id] = fatal[x.bus_id] || xid_is_fatal(x.xid, x.text);
  }
  if (by_gpu.empty()) {
    out.findings.push_back(finding("xid", Status::Pass, "", "no NVIDIA Xid in the kernel log since boot"));
    return;
  }
  for (const auto& [bus, xids] : by_gpu) {
    std::vector<std::string> parts;
    for (auto [xid, times] : xids) parts.push_back(times > 1 ? fmt::format("Xid {} ({} times)", xid, times)
                                                             : fmt::format("Xid {}", xid));
    std::string label = "GPU " + bus;
    for (const auto& d : pci.devices)
      if (d.bus_id == bus) label = d.label;
    HealthFinding f = finding("xid", fatal[bus] ? Status::Fail : Status::Warn, label,
                              fmt::format("{} in the kernel log since boot", fmt::join(parts, ", ")));
    f.expected = "no Xid";
    f.expected_from = "a healthy GPU";
    f.remedy = fatal[bus] ? "an Xid that leaves the GPU unusable: drain the node, reset or reboot; replace the GPU if it returns"
                          : "usually the application's error; many of them point at the GPU: watch it";
    int events = 0;
    for (auto [xid, times] : xids) events += times;
    f.values = {{"xid_events", double(events)}};
    out.findings.push_back(f);
  }
}

// ---- software -----------------------------------------------------------------------

std::string rdma_providers(const Root& root) {
  std::vector<std::string> out;
  const fs::path dir = root.at("/etc/libibverbs.d");
  for (const auto& name : list_dir(dir).value_or(std::vector<std::string>{})) {
    auto line = read_line(dir / name);
    if (line && line->rfind("driver ", 0) == 0) out.push_back(line->substr(7));
  }
  return fmt::format("{}", fmt::join(out, ","));
}

void read_software(const Root& root, GpuLibraries* libraries, const HealthExpectations& expect, NodeHealth& out) {
  NodeSoftware& s = out.software;
  s.kernel = read_line(root.at("/proc/sys/kernel/osrelease")).value_or("");
  if (s.nvidia_driver.empty()) {
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..."
    if (auto v = read_line(root.at("/proc/driver/nvidia/version"))) {
      std::istringstream words(*v);
      for (std::string w; words >> w;)
        if (w == "Module" && words >> w) s.nvidia_driver = w;
    }
  }
  s.rdma_providers = rdma_providers(root);
  if (expect.driver_version && s.nvidia_driver != *expect.driver_version) {
    HealthFinding f = finding("software", s.nvidia_driver.empty() ? Status::Unknown : Status::Fail, "",
                              s.nvidia_driver.empty() ? "no NVIDIA driver version readable (NVML, /proc/driver/nvidia)"
                                                      : "NVIDIA driver " + s.nvidia_driver);
    f.expected = *expect.driver_version;
    f.expected_from = "expect.driver_version";
    f.remedy = "install the expected driver on this node";
    out.findings.push_back(f);
  }
  std::vector<std::string> parts;
  if (!s.nvidia_driver.empty()) parts.push_back("NVIDIA driver " + s.nvidia_driver);
  if (!s.cuda_driver.empty()) parts.push_back("CUDA " + s.cuda_driver);
  if (libraries && (s.nvidia_gpus > 0 || !s.nvidia_driver.empty())) {
    NcclReading nccl = libraries->read_nccl();
    if (nccl.version) {
      s.nccl = nccl_version_text(*nccl.version);
      s.nccl_net_plugin = nccl.net_plugin ? "yes" : "no";
      parts.push_back(fmt::format("NCCL {} ({} net plugin)", s.nccl, nccl.net_plugin ? "with a" : "no"));
    } else {
      parts.push_back("no NCCL (" + nccl.why_not + ")");
    }
  }
  parts.push_back("kernel " + (s.kernel.empty() ? std::string("?") : s.kernel));
  if (!s.rdma_providers.empty()) parts.push_back("RDMA " + s.rdma_providers);
  out.findings.push_back(finding("software", Status::Pass, "", fmt::format("{}", fmt::join(parts, ", "))));
}

}  // namespace

NodeHealth check_node_health(const HealthSources& sources, const HealthExpectations& expect) {
  const Root root{sources.root};
  auto starting = [&](const char* check) {
    if (sources.progress) sources.progress->store(check);
  };
  NodeHealth out;
  // NVML first: its names make every finding about a GPU name its model.
  starting("gpu");
  std::string why_not = sources.why_no_gpu_libraries;
  std::optional<NvmlHealthReading> nvml;
  if (sources.gpus) nvml = sources.gpus->read_nvml(why_not);
  std::map<std::string, std::string> gpu_names;
  std::set<std::string> busy_gpus;  // a GPU at work keeps its link at full speed
  if (nvml)
    for (const auto& g : nvml->gpus) {
      if (!g.error.empty()) continue;
      if (!g.name.empty()) gpu_names[g.bus_id] = g.name;
      if (g.throttle_reasons && !(*g.throttle_reasons & throttle::kGpuIdle)) busy_gpus.insert(g.bus_id);
    }
  starting("pcie_link");
  const PciView pci = read_pci(root, gpu_names);
  check_pcie(root, pci, busy_gpus, expect, out);
  starting("ib_port");
  check_ib(root, expect, out);
  check_gpus(pci, nvml, why_not, expect, out);
  starting("xid");
  check_xids(root, pci, out);
  starting("software");
  read_software(root, sources.gpus, expect, out);
  starting("link_errors");
  read_carriers(root, out.counters);
  return out;
}

NodeHealth check_node_health_within(const std::string& root, std::shared_ptr<GpuLibraries> gpus,
                                    const HealthExpectations& expect, std::chrono::milliseconds deadline,
                                    const std::string& why_no_gpu_libraries) {
  // Shared with the thread, which may outlive this call when a reading hangs.
  struct Run {
    std::mutex mutex;
    std::condition_variable finished;
    std::optional<NodeHealth> result;
    std::atomic<const char*> progress{"gpu"};
    std::shared_ptr<GpuLibraries> gpus;
  };
  auto run = std::make_shared<Run>();
  run->gpus = std::move(gpus);
  std::thread worker = signal_free_thread([run, root, expect, why_no_gpu_libraries] {
    NodeHealth health;
    try {
      health = check_node_health({root, run->gpus.get(), &run->progress, why_no_gpu_libraries}, expect);
    } catch (const std::exception& e) {
      // Nothing a check throws may end the agent: it becomes the node's finding.
      health.complete = false;
      health.findings.push_back(finding(run->progress.load(), Status::Unknown, "",
                                        std::string("the check could not run: ") + e.what()));
    }
    std::lock_guard lock(run->mutex);
    run->result = std::move(health);
    run->finished.notify_all();
  });
  {
    std::unique_lock lock(run->mutex);
    if (run->finished.wait_for(lock, deadline, [&] { return run->result.has_value(); })) {
      NodeHealth health = std::move(*run->result);
      lock.unlock();
      // Joined, not left: a thread that ends after muster has exited keeps what it held
      // (glibc's dlerror buffer, from a library that did not load) from being freed.
      worker.join();
      return health;
    }
  }
  worker.detach();  // stuck in a read that may never return: left to end with the process
  const std::string stuck = run->progress.load();
  const bool in_nvml = stuck == "gpu";
  HealthFinding hung = finding(stuck, Status::Fail, "",
                               fmt::format("the health checks did not finish within {:g} s: stuck in the {} check "
                                           "({})", deadline.count() / 1e3, stuck,
                                           in_nvml ? "NVML did not answer" : "a read of the node's files did not return"));
  hung.expected = "an answer";
  hung.expected_from = "the health checks' deadline";
  hung.remedy = in_nvml ? "NVML hangs on a wedged GPU: drain the node; nvidia-smi will hang too; reset the GPU or reboot"
                        : "a file system or driver stopped answering: drain the node and look at dmesg";
  // A hang in NVML leaves the node's files to read: what they say (an Xid 79, a link gone)
  // names the GPU that hung. A hang reading them would hang again, so then only the hang.
  NodeHealth out;
  if (in_nvml) {
    HealthSources files_only{root, nullptr, nullptr, "NVML hung: see the gpu check above"};
    out = check_node_health(files_only, expect);
  }
  out.complete = false;
  out.findings.insert(out.findings.begin(), std::move(hung));
  return out;
}

std::vector<HealthCounter> read_health_counters(const std::string& root_dir) {
  const Root root{root_dir};
  std::vector<HealthCounter> out;
  for (const auto& p : read_ib_ports(root))
    for (const char* name : kIbCounters)
      if (auto v = read_count(p.dir / "counters" / name)) out.push_back({p.label, name, *v});
  read_carriers(root, out);
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
