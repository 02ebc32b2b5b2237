// Checks on numeric flags whose failure messages say what was wrong in plain words
// (CLI11's own print the whole range of a double).
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "launcher/job/launch.h"
#include "topology/binding.h"

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
        return fmt::format("{} is too small: it must be {} {:.15g}", text,
                           strictly ? "more than" : "at least", min);
      },
      fmt::format("NUMBER {} {:g}", strictly ? ">" : ">=", min));
}

// The flag's value must be a number no larger than `max`.
inline CLI::Validator at_most(double max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        try {
          if (std::stod(text) <= max) return "";
        } catch (const std::exception&) {
          return fmt::format("'{}' is not a number", text);
        }
        return fmt::format("{} is too large: it must be at most {:.15g}", text, max);
      },
      fmt::format("NUMBER <= {:.15g}", max));
}

// The flag's value must be a number from `min` to `max`, a whole one when `whole`.
inline CLI::Validator in_range(double min, double max, bool whole = false) {
  return CLI::Validator(
      [min, max, whole](std::string& text) -> std::string {
        // A whole number is digits alone, as the integer it is converted to reads it.
        const size_t digits = text.find_first_not_of("+-") == 1 ? 1 : 0;
        if (whole && (text.size() == digits || text.find_first_not_of("0123456789", digits) != std::string::npos))
          return fmt::format("'{}' is not a whole number", text);
        double value = 0;
        try {
          size_t used = 0;
          value = std::stod(text, &used);
          if (used != text.size() || !std::isfinite(value)) throw std::invalid_argument(text);
        } catch (const std::exception&) {
          return fmt::format("'{}' is not a number", text);
        }
        if (value >= min && value <= max) return "";
        return fmt::format("{} is out of range: it must be from {:.15g} to {:.15g}", text, min, max);
      },
      fmt::format("{}..{}", min, max));
}

// The flag's value names a file to write: a word that starts with '-' is an option that
// landed there (doctor --json -f c.yaml), not a file, unless it is - for standard output.
inline CLI::Validator file_not_option(const std::string& example, bool dash_is_standard_output) {
  return CLI::Validator(
      [example, dash_is_standard_output](std::string& text) -> std::string {
        if (text.empty() || text[0] != '-' || (dash_is_standard_output && text == "-")) return "";
        return fmt::format("'{}' is not a file to write to; name one ({}, or ./{}){}", text, example,
                           text, dash_is_standard_output ? ", or give the flag last or as - to print" : "");
      },
      "");
}

// The flag says where the cluster is: an empty value is a mistake (a CI variable that was
// never set: -f "$CLUSTER"), never "this machine", which only leaving every such flag out means.
inline CLI::Validator not_empty(const std::string& example, const std::string& left_out = "to use this machine") {
  return CLI::Validator(
      [example, left_out](std::string& text) -> std::string {
        if (!text.empty()) return "";
        return fmt::format("is empty (a variable that was never set?); name it ({}), or leave the flag out "
                           "{}", example, left_out);
      },
      "");
}

// The longest wait a duration flag takes: a week. Longer is a typo, and past about 292 years
// (1e300 s) a deadline overflows the clock's time_point.
inline constexpr double kLongestWaitSeconds = 7 * 24 * 3600;

// The flag's value must be a number above zero.
inline CLI::Validator positive() { return at_least(0, true); }

// Declares `--name` taking one of `values`' names, stored in `target` as its value. A wrong
// word is refused naming the choices ("--tag: sideways not in {host,none,rank}").
template <typename T>
CLI::Option* add_choice(CLI::App& app, const std::string& name, T& target,
                        const std::map<std::string, T>& values, const std::string& help,
                        const std::string& default_name = "") {
  std::vector<std::string> names;
  for (const auto& [word, value] : values) names.push_back(word);
  auto* option = app.add_option_function<std::string>(
                        name, [&target, &values](const std::string& word) { target = values.at(word); }, help)
                     ->check(CLI::IsMember(names));
  if (!default_name.empty()) option->default_str(default_name);
  return option;
}

// "8", "64K", "128M", "1G" as bytes (K, M, G are powers of 1024). Throws Error(Usage)
// quoting `text` when it is not a size, or a size above 1 TiB.
size_t parse_bytes(const std::string& text);

// --mpi's words, for run.
inline const std::map<std::string, MpiServe>& mpi_choices() {
  static const std::map<std::string, MpiServe> choices = {
      {"auto", MpiServe::Auto}, {"pmix", MpiServe::Pmix}, {"pmi1", MpiServe::Pmi1}, {"none", MpiServe::None}};
  return choices;
}

// --bind's words, for run and smoke.
inline const std::map<std::string, BindPolicy>& bind_choices() {
  static const std::map<std::string, BindPolicy> choices = {
      {"none", BindPolicy::None}, {"numa", BindPolicy::Numa}, {"core", BindPolicy::Core}};
  return choices;
}

}  // namespace muster::cli
