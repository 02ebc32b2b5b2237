// NVIDIA Xids in the kernel log since boot: a fatal one fails its GPU, others warn.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "topology/health/checks.h"

namespace muster {

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

namespace health {

namespace {

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

}  // namespace

void check_xids(const NodeReading& node, NodeHealth& out) {
  const Root& root = node.root;
  const PciView& pci = node.pci;
  std::string why_not;
  auto log = read_kernel_log(root, why_not);
  if (!log) {
    HealthFinding f = finding("xid", Status::Unknown, "", why_not);
    f.remedy = "read dmesg as root for 'NVRM: Xid' lines";
    out.findings.push_back(f);
    return;
  }
  std::map<std::string, std::map<int, int>> by_gpu;  // bus id -> xid -> times
  std::set<std::pair<std::string, int>> fatal;       // (bus id, xid) of which one event was fatal
  for (const auto& x : find_xids(*log)) {
    ++by_gpu[x.bus_id][x.xid];
    if (xid_is_fatal(x.xid, x.text)) fatal.insert({x.bus_id, x.xid});
  }
  GrowingCounters& growing = *node.growing;
  bool any = false;
  for (const auto& [bus, xids] : by_gpu) {
    // Judged by what is new since the baseline where it holds this GPU's Xid, else since boot.
    std::vector<std::string> parts;
    bool is_fatal = false, since_baseline = false;
    int events = 0;
    for (auto [xid, times] : xids) {
      const std::string key = fmt::format("xid/{}/{}", bus, xid);
      const std::uint64_t judged = growing.judged(key, std::uint64_t(times));
      events += times;
      if (judged == 0) continue;
      if (growing.since_baseline(key)) {
        since_baseline = true;
        parts.push_back(fmt::format("{} new Xid {} ({} since boot)", judged, xid, times));
      } else {
        parts.push_back(times > 1 ? fmt::format("Xid {} ({} times)", xid, times) : fmt::format("Xid {}", xid));
      }
      if (fatal.count({bus, xid})) {
        is_fatal = true;
        growing.failed.insert(key);
      }
    }
    if (parts.empty()) continue;
    any = true;
    std::string label = "GPU " + bus;
    for (const auto& d : pci.devices)
      if (d.bus_id == bus) label = d.label;
    HealthFinding f = finding("xid", is_fatal ? Status::Fail : Status::Warn, label,
                              fmt::format("{} in the kernel log since {}", fmt::join(parts, ", "),
                                          since_baseline ? growing.baseline_time() : "boot"));
    f.expected = "no Xid";
    f.expected_from = since_baseline ? "the baseline accepted at " + growing.baseline_time() : "a healthy GPU";
    f.remedy = is_fatal ? "an Xid that leaves the GPU unusable: drain the node, reset or reboot; replace the GPU if it "
                          "returns; once repaired, muster health --accept-counters"
                        : "usually the application's error; many of them point at the GPU: watch it";
    f.values = {{"xid_events", double(events)}};
    out.findings.push_back(f);
  }
  if (!any)
    out.findings.push_back(finding("xid", Status::Pass, "",
                                   growing.baseline ? "no new NVIDIA Xid in the kernel log since " + growing.baseline_time()
                                                    : std::string("no NVIDIA Xid in the kernel log since boot")));
}

}  // namespace health
}  // namespace muster
