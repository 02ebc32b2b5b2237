#include "topology/line_rate.h"

#include <filesystem>
#include <system_error>

#include "topology/health/health.h"
#include "topology/sysfs_pci.h"

namespace muster {

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
    return parse_ib_rate(first_line_of((hca.path() / "ports" / std::to_string(port) / "rate").string()));
  }
  try {
    const long mbps = std::stol(first_line_of((net / "speed").string()));
    if (mbps > 0) return double(mbps) / 1000;
  } catch (const std::exception&) {
    // unreadable (EINVAL while the link is down) or empty: unknown
  }
  return std::nullopt;
}

}  // namespace muster
