#include "launcher/local/pmi1.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "launcher/error.h"

namespace muster {
namespace {

// "cmd=put kvsname=k key=a value=b c" -> {cmd: put, kvsname: k, key: a, value: "b c"}. A
// value or a message runs to the end of the line (RFC 13: a string may hold spaces); every
// other word is one key=value. Keys in any order, extra spaces and keys allowed.
std::map<std::string, std::string> parse_request(std::string_view line) {
  std::map<std::string, std::string> out;
  size_t at = 0;
  while (at < line.size()) {
    while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
    if (at >= line.size()) break;
    const size_t eq = line.find('=', at);
    size_t end = line.find(' ', at);
    if (eq == std::string_view::npos || (end != std::string_view::npos && eq > end)) {
      at = end == std::string_view::npos ? line.size() : end;  // a word without '=': ignored
      continue;
    }
    const std::string key(line.substr(at, eq - at));
    const bool to_the_end = key == "value" || key == "message" || key == "msg";
    if (to_the_end || end == std::string_view::npos) end = line.size();
    out[key] = std::string(line.substr(eq + 1, end - eq - 1));
    at = end;
  }
  return out;
}

std::optional<int> to_int(const std::string& text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string field(const std::map<std::string, std::string>& request, const char* key) {
  const auto it = request.find(key);
  return it == request.end() ? std::string() : it->second;
}

// A reply that says the request failed, in the words RFC 13 allows (no '=' or space in msg).
std::string refused(const std::string& cmd, const std::string& why) {
  std::string msg = why;
  std::replace(msg.begin(), msg.end(), ' ', '_');
  std::replace(msg.begin(), msg.end(), '=', ':');
  return fmt::format("cmd={} rc=-1 msg={}\n", cmd, msg);
}

}  // namespace

std::string pmi1_process_mapping(const std::vector<int>& node_of_rank) {
  struct Block {
    int node, nodes, per_node;
  };
  std::vector<Block> blocks;
  for (size_t r = 0; r < node_of_rank.size();) {
    size_t end = r;
    while (end < node_of_rank.size() && node_of_rank[end] == node_of_rank[r]) ++end;
    const Block run{node_of_rank[r], 1, int(end - r)};
    if (!blocks.empty() && blocks.back().per_node == run.per_node &&
        blocks.back().node + blocks.back().nodes == run.node)
      ++blocks.back().nodes;
    else
      blocks.push_back(run);
    r = end;
  }
  std::string out = "(vector";
  for (const Block& b : blocks) {
    out += fmt::format(",({},{},{})", b.node, b.nodes, b.per_node);
    if (out.size() >= Pmi1Node::kMaxValue) return "";
  }
  return out + ")";
}

size_t packed_pmi1_put_size(const std::string& key, const std::string& value) {
  return fmt::formatted_size("{} {}\n", key.size(), value.size()) + key.size() + value.size();
}

std::string pack_pmi1_puts(const std::map<std::string, std::string>& puts) {
  std::string out;
  for (const auto& [key, value] : puts) out += fmt::format("{} {}\n{}{}", key.size(), value.size(), key, value);
  return out;
}

std::map<std::string, std::string> unpack_pmi1_puts(const std::vector<std::string>& parts) {
  std::map<std::string, std::string> out;
  size_t total = 0;
  for (const std::string& part : parts) {
    total += part.size();
    if (total > Pmi1Node::kMaxSpaceBytes)
      throw Error(ErrorKind::Runtime, fmt::format("the nodes' PMI puts came to more than {} bytes",
                                                  Pmi1Node::kMaxSpaceBytes));
    std::string_view rest = part;
    while (!rest.empty()) {
      const size_t space = rest.find(' '), newline = rest.find('\n');
      std::optional<int> key_size, value_size;
      if (space < newline && newline != std::string_view::npos) {
        key_size = to_int(std::string(rest.substr(0, space)));
        value_size = to_int(std::string(rest.substr(space + 1, newline - space - 1)));
      }
      if (!key_size || !value_size || *key_size <= 0 || size_t(*key_size) >= Pmi1Node::kMaxKey ||
          *value_size < 0 || size_t(*value_size) >= Pmi1Node::kMaxValue ||
          rest.size() - newline - 1 < size_t(*key_size + *value_size))
        throw Error(ErrorKind::Runtime, "a node's PMI puts are malformed");
      rest.remove_prefix(newline + 1);
      out[std::string(rest.substr(0, size_t(*key_size)))] = std::string(rest.substr(size_t(*key_size), size_t(*value_size)));
      rest.remove_prefix(size_t(*key_size + *value_size));
    }
  }
  return out;
}

Pmi1Node::Pmi1Node(Pmi1Job job, std::vector<int> local_ranks) : job_(std::move(job)) {
  for (int rank : local_ranks) clients_[rank];
  // RFC 13: the process manager provides the mapping under this key; where it was too long,
  // the key is missing (MPICH refuses an empty value).
  if (!job_.process_mapping.empty()) {
    kvs_["PMI_process_mapping"] = job_.process_mapping;
    kvs_bytes_ = packed_pmi1_put_size("PMI_process_mapping", job_.process_mapping);
  }
}

Pmi1Node::Client& Pmi1Node::client(int rank) {
  const auto it = clients_.find(rank);
  if (it == clients_.end())
    throw Error(ErrorKind::Runtime, fmt::format("rank {} is not served here", rank));
  return it->second;
}

std::string Pmi1Node::feed(int rank, std::string_view bytes) {
  Client& c = client(rank);
  std::string replies;
  for (char ch : bytes) {
    if (ch != '\n') {
      if (c.pending.size() >= kMaxLine)
        throw Error(ErrorKind::Runtime, fmt::format("rank {} sent a PMI request longer than {} bytes", rank,
                                                    kMaxLine));
      c.pending.push_back(ch);
      continue;
    }
    std::string line;
    line.swap(c.pending);
    if (line.rfind("mcmd=", 0) == 0)
      throw Error(ErrorKind::Runtime,
                  fmt::format("rank {} asked PMI to spawn processes (MPI_Comm_spawn), which muster does "
                              "not serve", rank));
    const auto request = parse_request(line);
    const std::string cmd = field(request, "cmd");
    if (cmd.empty()) throw Error(ErrorKind::Runtime, fmt::format("rank {} sent a PMI line without cmd=", rank));
    if (!c.initialized && cmd != "init")
      throw Error(ErrorKind::Runtime, fmt::format("rank {} sent PMI cmd={} before cmd=init", rank, cmd));
    replies += answer(rank, c, request, cmd);
  }
  return replies;
}

std::string Pmi1Node::answer(int rank, Client& c, const std::map<std::string, std::string>& request,
                             const std::string& cmd) {
  if (cmd == "init") {
    if (to_int(field(request, "pmi_version")) != 1)
      return "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1\n";  // only version 1 here
    c.initialized = true;
    return "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n";
  }
  if (cmd == "get_maxes")
    return fmt::format("cmd=maxes kvsname_max={} keylen_max={} vallen_max={} rc=0\n", kMaxName, kMaxKey,
                       kMaxValue);
  if (cmd == "get_appnum") return "cmd=appnum appnum=0 rc=0\n";
  if (cmd == "get_universe_size") return fmt::format("cmd=universe_size size={} rc=0\n", job_.size);
  if (cmd == "get_my_kvsname") return fmt::format("cmd=my_kvsname kvsname={} rc=0\n", job_.kvsname);
  if (cmd == "put") {
    const std::string key = field(request, "key"), value = field(request, "value");
    if (field(request, "kvsname") != job_.kvsname) return refused("put_result", "no such kvsname");
    if (key.empty() || key.size() >= kMaxKey) return refused("put_result", "key empty or too long");
    if (value.size() >= kMaxValue) return refused("put_result", "value too long");
    if (++c.puts > kMaxPutsPerRank) return refused("put_result", "too many puts before a barrier");
    const size_t size = packed_pmi1_put_size(key, value);
    if (kvs_bytes_ + puts_bytes_ + size > kMaxSpaceBytes)
      return refused("put_result", "the key-value space is full");
    puts_bytes_ += size;
    puts_[key] = value;
    return "cmd=put_result rc=0\n";
  }
  if (cmd == "get") {
    if (field(request, "kvsname") != job_.kvsname) return refused("get_result", "no such kvsname");
    const auto it = kvs_.find(field(request, "key"));
    if (it == kvs_.end()) return refused("get_result", "key not found");
    return fmt::format("cmd=get_result rc=0 value={}\n", it->second);
  }
  if (cmd == "barrier_in") {
    c.in_barrier = true;
    return "";  // barrier_out once every node's ranks are in (complete_barrier)
  }
  if (cmd == "finalize") {
    c.finalized = true;
    return "cmd=finalize_ack rc=0\n";
  }
  if (cmd == "abort") {
    if (!abort_) {
      const std::string message = field(request, "message");
      abort_ = Pmi1Abort{rank, to_int(field(request, "exitcode")).value_or(1),
                         message.empty() ? field(request, "msg") : message};
    }
    return "";  // the rank exits on its own; the job ends with its failure
  }
  if (cmd == "publish_name" || cmd == "unpublish_name" || cmd == "lookup_name")
    return refused(cmd.substr(0, cmd.find('_')) + "_result", "name publishing is not served");
  throw Error(ErrorKind::Runtime, fmt::format("rank {} sent PMI cmd={}, which is not part of PMI-1", rank, cmd));
}

bool Pmi1Node::barrier_ready() const {
  return !clients_.empty() &&
         std::all_of(clients_.begin(), clients_.end(), [](const auto& c) { return c.second.in_barrier; });
}

std::map<std::string, std::string> Pmi1Node::take_puts() {
  std::map<std::string, std::string> out;
  out.swap(puts_);
  puts_bytes_ = 0;  // they come back with every node's, and count then
  return out;
}

std::map<int, std::string> Pmi1Node::complete_barrier(const std::map<std::string, std::string>& all_puts) {
  size_t bytes = kvs_bytes_;
  for (const auto& [key, value] : all_puts) {
    if (const auto it = kvs_.find(key); it != kvs_.end()) bytes -= packed_pmi1_put_size(key, it->second);
    bytes += packed_pmi1_put_size(key, value);
  }
  if (bytes > kMaxSpaceBytes)
    throw Error(ErrorKind::Runtime, fmt::format("every node's PMI puts would take the key-value space to {} "
                                                "bytes, more than the {} MiB muster keeps",
                                                bytes, kMaxSpaceBytes >> 20));
  for (const auto& [key, value] : all_puts) kvs_[key] = value;
  kvs_bytes_ = bytes;
  std::map<int, std::string> replies;
  for (auto& [rank, c] : clients_) {
    c.in_barrier = false;
    c.puts = 0;
    replies[rank] = "cmd=barrier_out rc=0\n";
  }
  ++barriers_;
  return replies;
}

std::vector<int> Pmi1Node::ranks_not_in_barrier() const {
  std::vector<int> out;
  for (const auto& [rank, c] : clients_)
    if (!c.in_barrier) out.push_back(rank);
  return out;
}

}  // namespace muster
