#include "launcher/cluster/diagnostics.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "launcher/error.h"

namespace muster {

std::string SourceLocation::str() const {
  if (line <= 0) return source;
  return fmt::format("{}:{}:{}", source, line, column);
}

std::string read_input_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in)
    throw Error(ErrorKind::Config,
                fmt::format("{}: cannot read the {}: {}", path, what, std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void Diagnostics::add(const SourceLocation& where, std::string problem) {
  messages_.push_back(fmt::format("{}: {}", where.str(), problem));
}

void Diagnostics::throw_if_any() const {
  if (!messages_.empty()) throw Error(ErrorKind::Config, messages_);
}

namespace {
// Edits between two words, a swap of neighbours counting as one ("nmae" -> "name").
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}
}  // namespace

std::optional<std::string> closest_match(std::string_view typed,
                                         const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = 0;
  for (const auto& c : candidates) {
    size_t d = edit_distance(typed, c);
    if (!best || d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  // A third of the word may be wrong: "slot" -> "slots", "hsot" -> "host", not "x" -> "env".
  if (best && best_distance <= std::max<size_t>(1, typed.size() / 3)) return best;
  return std::nullopt;
}

}  // namespace muster
