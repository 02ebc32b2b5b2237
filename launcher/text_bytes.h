// Strings whose bytes muster does not choose (a rank's argv and environment, a file name, a
// node's stderr, a process's command line) may be any bytes; JSON and XML text must be UTF-8.
// Two ways across: muster's own protocol carries them exactly, and a report for people and
// CI replaces what it cannot hold, and says how much it replaced.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace muster {

bool is_utf8(std::string_view bytes);

// Where to cut `text` near `at` without splitting a UTF-8 character in two: `at` moved
// forward (or back) over continuation bytes, at most three. For keeping part of a node's
// output: a cut through a character would make a report count a byte it replaced.
size_t character_boundary(std::string_view text, size_t at, bool forward);

// Appends to `kept` what fits of `more` within `limit` bytes, cut between characters. Once
// full (a cut leaves at most 3 bytes of room) nothing more is appended: a node's first words
// are never spliced with later ones.
void keep_first_words(std::string& kept, std::string_view more, size_t limit);

// For muster's protocol (agent frames): every string and object key in `value` that is not
// UTF-8 (or starts with NUL, which no C string does) is sent as NUL and then its bytes in
// hex; exactly_restored() undoes it. Byte for byte, whatever the bytes.
nlohmann::json bytes_kept(nlohmann::json value);
nlohmann::json exactly_restored(nlohmann::json value);

// Bytes as base64 (RFC 4648, padded), for a file's bytes inside a frame's JSON; the decoder
// answers nothing for text that is not base64.
std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);

// JSON text of `value` whose strings may hold bytes that are not UTF-8 (a GPU's model, an
// error quoting a node's words): those become U+FFFD rather than make dump() throw. For what
// muster tells its own processes; the agent protocol carries them exactly (bytes_kept).
std::string json_text(const nlohmann::json& value);

// For reports. Json: each byte sequence that is not UTF-8 becomes U+FFFD. Xml: also the
// characters XML 1.0 forbids even escaped (controls other than tab, newline and carriage
// return) and DEL, which CI parsers reject. `replaced` counts the bytes given up.
enum class ReportMarkup { Json, Xml };
struct ReportText {
  std::string text;
  size_t replaced = 0;
};
ReportText report_text(std::string_view bytes, ReportMarkup markup);

// report_text() for XML, then escaped for an XML or HTML text node or attribute value: & < > "
// and ' as entities both read (&#39;, not XML's &apos;, which HTML 4 lacks). JUnit's and the
// HTML page's one escaping.
ReportText markup_text(std::string_view bytes);

// A report as JSON text: report_text() on every string and key, then, when anything was
// replaced and the report is an object, a "replaced_bytes" field saying how many.
std::string report_json_text(nlohmann::json report, int indent);

}  // namespace muster
