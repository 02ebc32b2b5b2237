// JSON that came from another process (an agent, a probe rank, the head): parsed so that no
// number in it can make a later conversion undefined. nlohmann converts a floating-point
// value to an integer type with a plain cast, which is undefined outside the type's range
// (2.9e69 read as a size_t). No field of muster's protocols needs a float outside [0, 2^31),
// so any other float is refused at parse time, as a parse error.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace muster {

// Parses `text`; throws nlohmann::json::exception for malformed JSON or a float that no
// field could hold.
inline nlohmann::json parse_untrusted_json(std::string_view text) {
  return nlohmann::json::parse(text, [](int, nlohmann::json::parse_event_t event, nlohmann::json& value) {
    if (event == nlohmann::json::parse_event_t::value && value.is_number_float()) {
      const double v = value.get<double>();
      if (!(v >= 0 && v < 2147483648.0))
        throw nlohmann::json::type_error::create(302, "a number out of range", &value);
    }
    return true;
  });
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
