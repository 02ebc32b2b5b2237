// Whether a measurement was starved: a probe that got no answer while its machine had no CPU
// to spare, or while the kernel dropped packets it had no time to process, measured the
// machine, not the network. Such a failure is retried, and when it stays starved it is
// reported as not measured ("unknown"), never as an unreachable address.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace muster {

// What the kernel counts about CPU shortage, machine-wide.
struct CpuShortage {
  std::optional<std::uint64_t> stalled_us;  // /proc/pressure/cpu "some" total: time some task waited
  std::optional<std::uint64_t> dropped;     // /proc/net/softnet_stat column 2, summed over CPUs
};

// The "some" line's total of /proc/pressure/cpu; unset when it is not there or malformed.
std::optional<std::uint64_t> parse_cpu_pressure_total(std::string_view text);
// Packets dropped from the per-CPU backlogs, summed over the lines of /proc/net/softnet_stat.
std::optional<std::uint64_t> parse_softnet_dropped(std::string_view text);

// Both counters, from the files under `proc` (a fixture root in tests).
CpuShortage read_cpu_shortage(const std::string& proc = "/proc");

// A starved measurement's cause in words ("some task waited for a CPU 71% of the 2.0 s"),
// or "" when over `wall` from `before` to `after` tasks waited for a CPU less than half of
// the time. Dropped packets are no excuse: they are a symptom of the node, said of it as a
// finding (dropped_between), never a reason to call its failures unknown.
std::string starvation_between(const CpuShortage& before, const CpuShortage& after,
                               std::chrono::microseconds wall);

// Packets the kernel dropped from its backlogs between the two readings (0 when unknown).
std::uint64_t dropped_between(const CpuShortage& before, const CpuShortage& after);

// The "some" line's avg10 of /proc/pressure/cpu, as a fraction (0.42 for "avg10=42.00"): the
// share of the last 10 s some task waited for a CPU. Unset when not there or malformed.
std::optional<double> parse_cpu_pressure_avg10(std::string_view text);
std::optional<double> read_cpu_pressure_avg10(const std::string& proc = "/proc");

// The kernel's neighbour (ARP) table, which must hold an entry for every peer a node talks
// to. Past its limit the kernel cannot resolve a new peer at all: a SYN never leaves, or
// connect says "No route to host". That is the node's configuration, not the network, and
// the probe's failure says so.
struct NeighbourTable {
  std::optional<std::uint64_t> times_full;  // /proc/net/stat/arp_cache table_fulls, all CPUs
  std::optional<std::uint64_t> limit;       // net.ipv4.neigh.default.gc_thresh3
};

// The table_fulls column of /proc/net/stat/arp_cache (a header line naming the columns, then
// one line of hexadecimal words per CPU), summed.
std::optional<std::uint64_t> parse_neighbour_table_fulls(std::string_view text);

NeighbourTable read_neighbour_table(const std::string& proc = "/proc");

// Why a probe failed, when the table was full while it ran ("" when it was not).
std::string neighbour_table_between(const NeighbourTable& before, const NeighbourTable& after);

}  // namespace muster
