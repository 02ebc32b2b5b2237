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
          {"split_node", s.split_node}, {"pairs", s.pairs}, {"backend", backend},
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
  return s;
}

}  // namespace muster
