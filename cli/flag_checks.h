// Checks on numeric flags whose failure messages say what was wrong in plain words
// (CLI11's own print the whole range of a double).
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace muster::cli {

// The flag's value must be a number no smaller than `min` (above it, when `strictly`).
inline CLI::Validator at_least(double min, bool strictly = false) {
  return CLI::Validator(
      [min, strictly](std::string& text) -> std::string {
        double value = 0;
        try {
          size_t used = 0;
          value = std::stod(text, &used);
          if (used != text.size()) throw std::invalid_argument(text);
        } catch (const std::exception&) {
          return fmt::format("'{}' is not a number", text);
        }
        if (strictly ? value > min : value >= min) return "";
        return fmt::format("{} is too small: it must be {} {:g}", text,
                           strictly ? "more than" : "at least", min);
      },
      fmt::format("NUMBER {} {:g}", strictly ? ">" : ">=", min));
}

// The flag's value must be a number above zero.
inline CLI::Validator positive() { return at_least(0, true); }

}  // namespace muster::cli
