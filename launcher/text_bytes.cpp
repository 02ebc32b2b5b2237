#include "launcher/text_bytes.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

namespace muster {
namespace {

using nlohmann::json;

// The length of the UTF-8 sequence at the start of `s` (1-4), or 0 when it is not one: no
// overlong forms, no surrogates, nothing past U+10FFFF (RFC 3629).
size_t utf8_sequence(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
  else if (b0 == 0xE0) n = 3, low = 0xA0;
  else if (b0 == 0xED) n = 3, high = 0x9F;
  else if (b0 >= 0xE1 && b0 <= 0xEF) n = 3;
  else if (b0 == 0xF0) n = 4, low = 0x90;
  else if (b0 >= 0xF1 && b0 <= 0xF3) n = 4;
  else if (b0 == 0xF4) n = 4, high = 0x8F;
  else return 0;
  if (s.size() < n || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < n; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  return n;
}

constexpr char kHex[] = "0123456789abcdef";

std::string kept(const std::string& s) {
  if (is_utf8(s) && (s.empty() || s[0] != '\0')) return s;
  std::string out(1, '\0');
  for (unsigned char c : s) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string restored(const std::string& s) {
  if (s.empty() || s[0] != '\0') return s;
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw json::other_error::create(501, "a byte string that is not hex", nullptr);
  };
  if (s.size() % 2 != 1) throw json::other_error::create(501, "a byte string of odd length", nullptr);
  std::string out;
  out.reserve(s.size() / 2);
  for (size_t i = 1; i < s.size(); i += 2) out += char(nibble(s[i]) << 4 | nibble(s[i + 1]));
  return out;
}

// Deeper than any of muster's payloads or reports: a hostile one is refused, not recursed.
constexpr int kMaxDepth = 64;

// Every string and key of `value`, through `change`, in place.
template <typename Change>
void each_string(json& value, const Change& change, int depth = 0) {
  if (depth > kMaxDepth) throw json::other_error::create(501, "JSON nested too deep", nullptr);
  if (value.is_string()) {
    value = change(value.get_ref<const std::string&>());
  } else if (value.is_array()) {
    for (auto& element : value) each_string(element, change, depth + 1);
  } else if (value.is_object()) {
    json changed = json::object();
    for (auto& [key, element] : value.items()) {
      each_string(element, change, depth + 1);
      changed[change(key)] = std::move(element);
    }
    value = std::move(changed);
  }
}

}  // namespace

bool is_utf8(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t n = utf8_sequence(bytes);
    if (n == 0) return false;
    bytes.remove_prefix(n);
  }
  return true;
}

size_t character_boundary(std::string_view text, size_t at, bool forward) {
  const auto continuation = [&](size_t i) {
    return i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
  };
  for (int step = 0; step < 3 && continuation(at); ++step) {
    if (forward) ++at;
    else if (at > 0) --at;
  }
  return std::min(at, text.size());
}

void keep_first_words(std::string& kept, std::string_view more, size_t limit) {
  if (kept.size() + 3 >= limit) return;
  if (more.size() > limit - kept.size()) more = more.substr(0, character_boundary(more, limit - kept.size(), false));
  kept.append(more);
}

json bytes_kept(json value) {
  each_string(value, kept);
  return value;
}

json exactly_restored(json value) {
  each_string(value, restored);
  return value;
}

std::string json_text(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

ReportText report_text(std::string_view bytes, ReportMarkup markup) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  ReportText out;
  out.text.reserve(bytes.size());
  while (!bytes.empty()) {
    const size_t n = utf8_sequence(bytes);
    const unsigned char c = static_cast<unsigned char>(bytes[0]);
    const bool xml_forbids =
        markup == ReportMarkup::Xml && n == 1 && ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F);
    if (n == 0 || xml_forbids) {
      out.text += kReplacement;
      ++out.replaced;
      bytes.remove_prefix(1);
      continue;
    }
    out.text.append(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  return out;
}

std::string report_json_text(json report, int indent) {
  size_t replaced = 0;
  each_string(report, [&](const std::string& s) {
    ReportText t = report_text(s, ReportMarkup::Json);
    replaced += t.replaced;
    return std::move(t.text);
  });
  if (replaced > 0 && report.is_object())
    report["replaced_bytes"] = {
        {"count", replaced},
        {"why", fmt::format("{} byte{} that {} not UTF-8 (a node's output or a file name) {} "
                            "replaced with U+FFFD", replaced, replaced == 1 ? "" : "s",
                            replaced == 1 ? "is" : "are", replaced == 1 ? "was" : "were")}};
  return report.dump(indent);
}

ReportText markup_text(std::string_view bytes) {
  ReportText clean = report_text(bytes, ReportMarkup::Xml);
  std::string out;
  out.reserve(clean.text.size());
  for (char c : clean.text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  clean.text = std::move(out);
  return clean;
}

namespace {
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (n > 1) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (n > 2) v |= uint32_t(uint8_t(bytes[i + 2]));
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += n > 1 ? kBase64[(v >> 6) & 63] : '=';
    out += n > 2 ? kBase64[v & 63] : '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  auto value = [](char c) -> int {
    const char* at = c ? std::strchr(kBase64, c) : nullptr;
    return at ? int(at - kBase64) : -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') return std::nullopt;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const int d = k >= 4 - pad ? 0 : value(text[i + size_t(k)]);
      if (d < 0) return std::nullopt;
      v = (v << 6) | uint32_t(d);
    }
    out += char((v >> 16) & 255);
    if (pad < 2) out += char((v >> 8) & 255);
    if (pad < 1) out += char(v & 255);
  }
  return out;
}

}  // namespace muster
