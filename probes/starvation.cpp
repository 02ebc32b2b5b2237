#include "probes/starvation.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <vector>

#include <fmt/format.h>

namespace muster {
namespace {

// Both files are a few hundred bytes (softnet_stat: one line per CPU); a larger one is not
// what the kernel writes.
constexpr size_t kMostBytes = 1 << 20;

// Read a page at a time: every probe reads these files twice, and a buffer of the bound
// zeroed up front cost a megabyte of page faults per read.
std::optional<std::string> read_small(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text;
  char page[4096];
  while (in.read(page, sizeof page) || in.gcount() > 0) {
    text.append(page, size_t(in.gcount()));
    if (text.size() > kMostBytes) return std::nullopt;
  }
  return text;
}

template <typename T>
std::optional<T> number(std::string_view text, int base = 10) {
  T value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// Takes the first line off `text`.
std::string_view next_line(std::string_view& text) {
  const size_t newline = text.find('\n');
  std::string_view line = text.substr(0, newline);
  text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
  return line;
}

// A line's words, however many spaces apart (the kernel aligns its columns).
std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  for (size_t start; (start = line.find_first_not_of(' ')) != std::string_view::npos;) {
    line = line.substr(start);
    const size_t end = line.find(' ');
    out.push_back(line.substr(0, end));
    line = end == std::string_view::npos ? std::string_view() : line.substr(end);
  }
  return out;
}

// Column `index` of per-CPU lines of hexadecimal words, summed: unset when there is no line,
// or a line is short of the column (or not `width` words wide, when given) or not a number.
std::optional<std::uint64_t> sum_hex_column(std::string_view text, size_t index, std::optional<size_t> width) {
  std::uint64_t total = 0;
  bool any = false;
  while (!text.empty()) {
    const auto values = words(next_line(text));
    if (values.empty()) continue;
    if (values.size() <= index || (width && values.size() != *width)) return std::nullopt;
    auto value = number<std::uint64_t>(values[index], 16);
    if (!value) return std::nullopt;
    total += *value;
    any = true;
  }
  if (!any) return std::nullopt;
  return total;
}

// The value of `key` ("total", "avg10") on the "some" line of /proc/pressure/cpu:
// "some avg10=0.00 avg60=0.00 avg300=0.00 total=12345\nfull ...".
std::optional<std::string_view> some_line_value(std::string_view text, std::string_view key) {
  while (!text.empty()) {
    const std::string_view line = next_line(text);
    if (!line.starts_with("some ")) continue;
    for (std::string_view rest = line.substr(5); !rest.empty();) {
      const size_t space = rest.find(' ');
      const std::string_view word = rest.substr(0, space);
      rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
      if (word.size() > key.size() && word.starts_with(key) && word[key.size()] == '=') return word.substr(key.size() + 1);
    }
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::uint64_t> parse_cpu_pressure_total(std::string_view text) {
  const auto value = some_line_value(text, "total");
  return value ? number<std::uint64_t>(*value) : std::nullopt;
}

std::optional<std::uint64_t> parse_softnet_dropped(std::string_view text) {
  // One line per CPU of hexadecimal words: processed, dropped, time_squeeze, ...
  return sum_hex_column(text, 1, std::nullopt);
}

CpuShortage read_cpu_shortage(const std::string& proc) {
  CpuShortage out;
  if (auto text = read_small(proc + "/pressure/cpu")) out.stalled_us = parse_cpu_pressure_total(*text);
  if (auto text = read_small(proc + "/net/softnet_stat")) out.dropped = parse_softnet_dropped(*text);
  return out;
}

std::optional<std::uint64_t> parse_neighbour_table_fulls(std::string_view text) {
  const auto header = words(next_line(text));
  const auto column = std::find(header.begin(), header.end(), "table_fulls");
  if (column == header.end()) return std::nullopt;
  return sum_hex_column(text, size_t(column - header.begin()), header.size());
}

NeighbourTable read_neighbour_table(const std::string& proc) {
  NeighbourTable out;
  if (auto text = read_small(proc + "/net/stat/arp_cache")) out.times_full = parse_neighbour_table_fulls(*text);
  if (auto text = read_small(proc + "/sys/net/ipv4/neigh/default/gc_thresh3")) {
    while (!text->empty() && (text->back() == '\n' || text->back() == ' ')) text->pop_back();
    out.limit = number<std::uint64_t>(*text);
  }
  return out;
}

std::string neighbour_table_between(const NeighbourTable& before, const NeighbourTable& after) {
  if (!before.times_full || !after.times_full || *after.times_full <= *before.times_full) return "";
  return fmt::format("the kernel's neighbour table was full{}: it cannot hold an entry for every peer; raise "
                     "net.ipv4.neigh.default.gc_thresh3 (and gc_thresh2) above the number of peers",
                     after.limit ? fmt::format(" (gc_thresh3 is {})", *after.limit) : "");
}

std::string starvation_between(const CpuShortage& before, const CpuShortage& after,
                               std::chrono::microseconds wall) {
  std::string why;
  if (before.stalled_us && after.stalled_us && *after.stalled_us >= *before.stalled_us && wall.count() > 0) {
    const double share = double(*after.stalled_us - *before.stalled_us) / double(wall.count());
    if (share >= 0.5)
      why = fmt::format("some task waited for a CPU {:.0f}% of the {:.1f} s", 100 * std::min(share, 1.0),
                        double(wall.count()) / 1e6);
  }
  return why;
}

std::uint64_t dropped_between(const CpuShortage& before, const CpuShortage& after) {
  if (!before.dropped || !after.dropped || *after.dropped < *before.dropped) return 0;
  return *after.dropped - *before.dropped;
}

std::optional<double> parse_cpu_pressure_avg10(std::string_view text) {
  const auto value = some_line_value(text, "avg10");
  if (!value) return std::nullopt;
  // "42.00": hundredths, read as integers so that no locale decides the decimal point.
  const size_t dot = value->find('.');
  const auto whole = number<std::uint64_t>(value->substr(0, dot));
  const auto hundredths = dot == std::string_view::npos ? std::optional<std::uint64_t>(0)
                                                        : number<std::uint64_t>(value->substr(dot + 1));
  if (!whole || !hundredths || *whole > 100 || (dot != std::string_view::npos && value->size() - dot > 3))
    return std::nullopt;
  return (double(*whole) + double(*hundredths) / 100) / 100;
}

std::optional<double> read_cpu_pressure_avg10(const std::string& proc) {
  const auto text = read_small(proc + "/pressure/cpu");
  return text ? parse_cpu_pressure_avg10(*text) : std::nullopt;
}

}  // namespace muster
