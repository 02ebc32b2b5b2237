// JSON that came from another process (an agent, a probe rank, the head): parsed so that no
// number in it can make a later conversion undefined. nlohmann converts a floating-point
// value to an integer type with a plain cast, which is undefined outside the type's range
// (2.9e69 read as a size_t). Two ways to stay safe: a protocol whose integers are read with
// a plain get<int>() refuses at parse time every float outside [0, 2^31), which no such field
// needs (Floats::BelowTwoToThe31); a protocol that reads each integer through
// json_integer(), which checks the range where the conversion is, lets every finite float
// through (Floats::AnyFinite): a figure in bytes a second or a negative reading is data.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace muster {

enum class Floats { BelowTwoToThe31, AnyFinite };

// Parses `text`; throws nlohmann::json::exception for malformed JSON or a float that no
// field could hold.
inline nlohmann::json parse_untrusted_json(std::string_view text, Floats floats = Floats::BelowTwoToThe31) {
  return nlohmann::json::parse(text, [floats](int, nlohmann::json::parse_event_t event, nlohmann::json& value) {
    if (event == nlohmann::json::parse_event_t::value && value.is_number_float()) {
      const double v = value.get<double>();
      const bool kept = floats == Floats::AnyFinite ? std::isfinite(v) : v >= 0 && v < 2147483648.0;
      if (!kept) throw nlohmann::json::type_error::create(302, "a number out of range", &value);
    }
    return true;
  });
}

// `value` as an integer in [low, high], whether written as an integer or a float; throws
// nlohmann::json::exception when it is neither a number nor in range, before any conversion.
template <typename Int>
Int json_integer(const nlohmann::json& value, Int low, Int high) {
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (std::cmp_greater_equal(u, low) && std::cmp_less_equal(u, high)) return static_cast<Int>(u);
  } else if (value.is_number_integer()) {
    const auto i = value.get<std::int64_t>();
    if (std::cmp_greater_equal(i, low) && std::cmp_less_equal(i, high)) return static_cast<Int>(i);
  } else if (value.is_number_float()) {
    // high + 1 as a double is exact or rounds to the next power of two: below it, the cast
    // truncates into [low, high].
    const double d = value.get<double>();
    if (std::isfinite(d) && d >= static_cast<double>(low) && d < static_cast<double>(high) + 1.0)
      return static_cast<Int>(d);
  }
  throw nlohmann::json::type_error::create(302, "an integer out of range", &value);
}

// The same, with a discarded value (is_discarded()) instead of an exception.
inline nlohmann::json parse_untrusted_json_or_discarded(std::string_view text) {
  try {
    return parse_untrusted_json(text);
  } catch (const nlohmann::json::exception&) {
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
}

}  // namespace muster
