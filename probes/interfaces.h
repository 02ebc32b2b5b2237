// This machine's network addresses, as candidates for reaching it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace muster {

// One IPv4 address of an interface.
struct LocalAddress {
  std::string interface;  // "eth0"
  std::string address;    // "10.1.0.3"
  int prefix_length = 0;  // 24
  // What the interface's link trained to (topology/line_rate.h), in Gbit/s; unset: unknown.
  std::optional<double> line_rate_gbps = {};
};

// Every non-loopback IPv4 address of an interface that is up.
std::vector<LocalAddress> local_addresses();

// "10.1.0.0/24" for 10.1.0.3 with prefix 24.
std::string subnet_of(const std::string& address, int prefix_length);

// True for 127.0.0.0/8 (and unparsable text).
bool is_loopback(const std::string& address);

// Whether `name` resolves to an address off loopback (what Gloo and NCCL fall back to for a
// host's own name when no interface is named; 127.0.1.1, as Debian's /etc/hosts has it, is
// an address no peer can reach). Unset when the resolver did not answer
// within `limit`: a resolver that waits on a dead DNS server is left to finish on its own.
std::optional<bool> name_resolves_within(const std::string& name, std::chrono::milliseconds limit);

}  // namespace muster
