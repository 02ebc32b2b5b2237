#include "launcher/json_fields.h"
#include "launcher/job/smoke_protocol.h"

namespace muster {

namespace {
const char* kind_name(SmokeEvent::Kind k) {
  switch (k) {
    case SmokeEvent::Kind::Enter: return "enter";
    case SmokeEvent::Kind::Result: return "result";
    case SmokeEvent::Kind::Skip: return "skip";
    case SmokeEvent::Kind::Error: break;
  }
  return "error";
}
}  // namespace

nlohmann::json smoke_event_json(const SmokeEvent& e) {
  return {{"type", kind_name(e.kind)}, {"seq", e.seq}, {"group", e.group}, {"op", op_name(e.op)},
          {"bytes", e.bytes}, {"count", e.count}, {"time_us", e.time_us}, {"wrong", e.wrong},
          {"message", e.message}, {"gave_up", e.gave_up}};
}

SmokeEvent smoke_event_from_json(const nlohmann::json& j) {
  SmokeEvent e;
  std::string type = j.at("type");
  e.kind = type == "enter" ? SmokeEvent::Kind::Enter
           : type == "result" ? SmokeEvent::Kind::Result
           : type == "skip" ? SmokeEvent::Kind::Skip : SmokeEvent::Kind::Error;
  e.seq = j.at("seq");
  e.group = j.at("group");
  e.op = op_from_name(j.at("op")).value_or(CollectiveOp::Barrier);
  e.bytes = j.at("bytes");
  e.count = j.at("count");
  e.time_us = j.at("time_us");
  e.wrong = j.at("wrong");
  e.message = j.at("message");
  e.gave_up = j.at("gave_up");
  return e;
}

std::optional<nlohmann::json> parse_smoke_line(std::string_view line) {
  if (line.substr(0, kSmokeLinePrefix.size()) != kSmokeLinePrefix) return std::nullopt;
  try {
    return parse_untrusted_json(line.substr(kSmokeLinePrefix.size()));
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

nlohmann::json smoke_settings_json(const SmokeSettings& s, const std::string& backend,
                                   long timeout_ms, const std::string& secret) {
  nlohmann::json ops = nlohmann::json::array();
  for (CollectiveOp op : s.ops) ops.push_back(op_name(op));
  return {{"ops", ops}, {"min_bytes", s.min_bytes}, {"max_bytes", s.max_bytes},
          {"step_factor", s.step_factor}, {"iters", s.iters}, {"warmup", s.warmup},
          {"split_node", s.split_node}, {"pairs", s.pairs}, {"pair_round_s", s.pair_round_s},
          {"pairs_below_busbw_gbps", s.pairs_below_busbw_gbps ? nlohmann::json(*s.pairs_below_busbw_gbps) : nlohmann::json()},
          {"backend", backend},
          {"timeout_ms", timeout_ms}, {"secret", secret}};
}

SmokeSettings smoke_settings_from_json(const nlohmann::json& j) {
  SmokeSettings s;
  s.ops.clear();
  for (const auto& name : j.at("ops"))
    if (auto op = op_from_name(name)) s.ops.push_back(*op);
  s.min_bytes = j.at("min_bytes");
  s.max_bytes = j.at("max_bytes");
  s.step_factor = j.at("step_factor");
  s.iters = j.at("iters");
  s.warmup = j.at("warmup");
  s.split_node = j.at("split_node");
  s.pairs = j.at("pairs");
  s.pair_round_s = j.at("pair_round_s");
  if (const auto& below = j.at("pairs_below_busbw_gbps"); !below.is_null()) s.pairs_below_busbw_gbps = below.get<double>();
  return s;
}

nlohmann::json culprit_report_json(const CulpritReport& r) {
  auto links = [](const std::vector<std::pair<int, int>>& pairs) {
    nlohmann::json out = nlohmann::json::array();
    for (auto [a, b] : pairs) out.push_back({a, b});
    return out;
  };
  nlohmann::json measured = nlohmann::json::array();
  for (const auto& m : r.measured) measured.push_back({m.a, m.b, m.gbps, m.round});
  return {{"type", "culprits"}, {"slow_nodes", r.slow_nodes}, {"slow_links", links(r.slow_links)},
          {"unknown_links", links(r.unknown_links)}, {"unknown", r.unknown},
          {"split", r.split}, {"below_the_fast", r.below_the_fast},
          {"typical_gbps", r.typical_gbps}, {"threshold_gbps", r.threshold_gbps},
          {"rounds", r.rounds}, {"measured", measured}};
}

CulpritReport culprit_report_from_json(const nlohmann::json& j, int nodes) {
  // The search measures at most a round of n/2 pairs per round, in at most 6 rounds, and
  // more rounds are never asked for (CulpritSearchOptions::max_rounds).
  const size_t most_pairs = size_t(nodes) * 4 + 16;
  // A whole number in [0, below), checked before it is converted: a float or one past int's
  // range is no node and no round.
  auto whole = [](const nlohmann::json& v, long below, const char* what) {
    if (!v.is_number_integer() || v.get<long>() < 0 || v.get<long>() >= below)
      throw nlohmann::json::other_error::create(501, what, nullptr);
    return int(v.get<long>());
  };
  auto node = [&](const nlohmann::json& v) { return whole(v, nodes, "a node outside the plan"); };
  constexpr long kMostRounds = 64;
  auto list = [&](const nlohmann::json& v) -> const nlohmann::json& {
    if (!v.is_array() || v.size() > most_pairs)
      throw nlohmann::json::other_error::create(501, "a list longer than the search measures", nullptr);
    return v;
  };
  auto links = [&](const nlohmann::json& v) {
    std::vector<std::pair<int, int>> out;
    for (const auto& l : list(v)) out.emplace_back(node(l.at(0)), node(l.at(1)));
    return out;
  };
  CulpritReport r;
  for (const auto& n : list(j.at("slow_nodes"))) r.slow_nodes.push_back(node(n));
  for (const auto& n : list(j.at("unknown"))) r.unknown.push_back(node(n));
  r.split = j.at("split").get<bool>();
  for (const auto& n : list(j.at("below_the_fast"))) r.below_the_fast.push_back(node(n));
  r.slow_links = links(j.at("slow_links"));
  r.unknown_links = links(j.at("unknown_links"));
  r.typical_gbps = j.at("typical_gbps");
  r.threshold_gbps = j.at("threshold_gbps");
  r.rounds = whole(j.at("rounds"), kMostRounds, "more rounds than the search takes");
  for (const auto& m : list(j.at("measured")))
    r.measured.push_back({node(m.at(0)), node(m.at(1)), m.at(2).get<double>(),
                          whole(m.at(3), kMostRounds, "more rounds than the search takes")});
  return r;
}

}  // namespace muster
