#include "launcher/cluster/hostfile.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "launcher/error.h"
#include "launcher/cluster/hostlist.h"

namespace muster {
namespace {

std::optional<long> parse_slot_number(std::string_view text) {
  long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) return LONG_MAX;  // reported as too many below
  if (ec != std::errc() || end != text.data() + text.size() || value < 1) return std::nullopt;
  return value;
}

// "" when `n` slots are allowed; else why not.
std::string too_many_slots(long n) {
  return n > kMaxSlotsPerNode
             ? fmt::format("at most {} slots per node (muster's limit)", kMaxSlotsPerNode)
             : "";
}

// Adds each host of `hosts` as a node, reporting a host named twice.
void add_nodes(ClusterSpec& spec, const std::vector<std::string>& hosts, SlotCount slots,
               const SourceLocation& where, std::map<std::string, SourceLocation>& seen,
               Diagnostics& diag, ClusterUse use) {
  for (const auto& host : hosts) {
    auto [it, inserted] = seen.emplace(host, where);
    if (!inserted) {
      diag.add(where, fmt::format("host '{}' is listed twice (first at {}); a machine listed "
                                  "twice would {}", host, it->second.str(), listed_twice_would(use)));
      continue;
    }
    spec.nodes.push_back(NodeSpec{host, host, slots, std::nullopt, {}, where});
  }
}

}  // namespace

ClusterSpec parse_hostfile(std::string_view text, const std::string& source, ClusterUse use) {
  ClusterSpec spec;
  spec.source = source;
  Diagnostics diag;
  std::map<std::string, SourceLocation> seen;
  HostBudget budget;  // across every line
  std::istringstream lines{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::vector<std::pair<std::string, int>> words;  // word, column
    for (size_t i = 0; i < line.size();) {
      if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') { ++i; continue; }
      size_t j = line.find_first_of(" \t\r", i);
      if (j == std::string::npos) j = line.size();
      words.emplace_back(line.substr(i, j - i), int(i) + 1);
      i = j;
    }
    if (words.empty()) continue;
    SourceLocation where{source, number, words[0].second};
    SlotCount slots;
    bool ok = true;
    for (size_t w = 1; w < words.size(); ++w) {
      const auto& [word, column] = words[w];
      SourceLocation word_at{source, number, column};
      auto eq = word.find('=');
      std::string key = word.substr(0, eq);
      std::string value = eq == std::string::npos ? "" : word.substr(eq + 1);
      if (key == "slots") {
        auto n = parse_slot_number(value);
        if (n && !too_many_slots(*n).empty()) {
          diag.add(word_at, fmt::format("slots={}: {}", value, too_many_slots(*n)));
          ok = false;
        } else if (n) {
          slots.fixed = int(*n);
        } else {
          diag.add(word_at, fmt::format("slots must be a whole number of at least 1, not '{}'",
                                        value));
          ok = false;
        }
      } else if (key == "max_slots" || key == "max-slots") {
        // Open MPI's oversubscription cap: muster never oversubscribes, so it only checks it.
        if (!parse_slot_number(value)) {
          diag.add(word_at, fmt::format("{} must be a whole number, not '{}'", key, value));
          ok = false;
        }
      } else {
        std::string msg = fmt::format("unknown word '{}'; a hostfile line is 'HOST slots=N'",
                                      word);
        if (auto guess = closest_match(key, {"slots", "max_slots"}))
          msg = fmt::format("unknown word '{}', did you mean '{}=...'?", word, *guess);
        diag.add(word_at, msg);
        ok = false;
      }
    }
    if (!ok) continue;
    try {
      add_nodes(spec, expand_hostlist(words[0].first, &budget), slots, where, seen, diag, use);
    } catch (const Error& e) {
      diag.add(where, e.what());
    }
  }
  if (spec.nodes.empty() && diag.empty())
    diag.add({source, 0, 0}, "the hostfile names no hosts; write one 'HOST slots=N' per line");
  diag.throw_if_any();
  return spec;
}

ClusterSpec load_hostfile(const std::string& path, ClusterUse use) {
  return parse_hostfile(read_input_file(path, "hostfile"), path, use);
}

ClusterSpec parse_host_option(std::string_view text, ClusterUse use) {
  ClusterSpec spec;
  spec.source = "-H";
  Diagnostics diag;
  std::map<std::string, SourceLocation> seen;
  HostBudget budget;  // across every part of -H
  SourceLocation where{fmt::format("-H '{}'", text), 0, 0};
  for (const std::string& part : split_outside_brackets(text, ',')) {
    std::string hosts = part;
    SlotCount slots;
    if (auto colon = part.rfind(':'); colon != std::string::npos && part.find(']', colon) == std::string::npos) {
      hosts = part.substr(0, colon);
      auto n = parse_slot_number(std::string_view(part).substr(colon + 1));
      if (!n) {
        diag.add(where, fmt::format("'{}': the slot count after ':' must be a whole number of "
                                    "at least 1", part));
        continue;
      }
      if (!too_many_slots(*n).empty()) {
        diag.add(where, fmt::format("'{}': {}", part, too_many_slots(*n)));
        continue;
      }
      slots.fixed = int(*n);
    }
    try {
      add_nodes(spec, expand_hostlist(hosts, &budget), slots, where, seen, diag, use);
    } catch (const Error& e) {
      diag.add(where, e.what());
    }
  }
  diag.throw_if_any();
  return spec;
}

std::string this_hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

ClusterSpec this_machine_cluster() {
  ClusterSpec spec;
  spec.source = "this machine";
  spec.is_this_machine = true;
  spec.nodes.push_back(NodeSpec{this_hostname(), "127.0.0.1", {}, std::nullopt, {}, {}});
  return spec;
}

bool is_this_machine(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  const std::string mine = this_hostname();
  return host == mine || host == mine.substr(0, mine.find('.'));
}

bool only_this_machine(const ClusterSpec& cluster) {
  return std::all_of(cluster.nodes.begin(), cluster.nodes.end(),
                     [](const NodeSpec& n) { return is_this_machine(n.address); });
}

}  // namespace muster
