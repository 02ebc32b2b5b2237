// An interface's line rate as the kernel reports it: the speed its link trained to, not what
// a stream measured over it. A link that trained down (a 100 Gbit/s port at 10, an HCA port at
// 1X of 4X) caps every stream through it, and the peers' numbers alone cannot show it when
// every node is alike.
#pragma once

#include <optional>
#include <string>

namespace muster {

// Past this (100 Tbit/s) a rate is no link's: a driver's way of saying it does not know.
inline constexpr double kMostLineRateGbps = 1e5;

// In Gbit/s. For the netdev of an InfiniBand HCA (IPoIB), its port's rate:
// SYS/class/net/IF/device/infiniband/DEV/ports/(dev_port + 1)/rate, "100 Gb/sec (4X EDR)".
// Otherwise SYS/class/net/IF/speed, in Mb/s. Unknown (nullopt) where the kernel cannot
// tell: a link that is down or a virtual device without a speed (-1, or a read that fails),
// or a number past kMostLineRateGbps.
std::optional<double> interface_line_rate_gbps(const std::string& interface, const std::string& sys = "/sys");

}  // namespace muster
