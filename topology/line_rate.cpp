#include "topology/line_rate.h"

#include <filesystem>
#include <system_error>

#include "topology/health/health.h"
#include "topology/sysfs_pci.h"

namespace muster {
namespace {

// A driver that cannot tell may say -1, 0 or 4294967295 (SPEED_UNKNOWN as unsigned): none is
// a link's. The fastest links are 800 Gbit/s.
std::optional<double> plausible(std::optional<double> gbps) {
  if (gbps && *gbps > 0 && *gbps < kMostLineRateGbps) return gbps;
  return std::nullopt;
}

}  // namespace

std::optional<double> interface_line_rate_gbps(const std::string& interface, const std::string& sys) {
  // A name from getifaddrs, used as one path component: nothing that climbs out of it.
  if (interface.empty() || interface.find('/') != std::string::npos || interface == "." || interface == "..")
    return std::nullopt;
  namespace fs = std::filesystem;
  const fs::path net = fs::path(sys) / "class/net" / interface;
  std::error_code error;
  for (const auto& hca : fs::directory_iterator(net / "device/infiniband", error)) {
    int port = 1;  // dev_port counts from 0, the HCA's ports from 1
    try {
      port += std::stoi(first_line_of((net / "dev_port").string()));
    } catch (const std::exception&) {
      // no dev_port (older kernels): the first port
    }
    return plausible(parse_ib_rate(first_line_of((hca.path() / "ports" / std::to_string(port) / "rate").string())));
  }
  try {
    return plausible(double(std::stol(first_line_of((net / "speed").string()))) / 1000);
  } catch (const std::exception&) {
    return std::nullopt;  // unreadable (EINVAL while the link is down) or empty: unknown
  }
}

}  // namespace muster
