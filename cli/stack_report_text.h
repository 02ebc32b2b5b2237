// The stacks report in words (the odd rank first, then each place the ranks are in, cut to a
// readable depth) and in JSON, whole.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "launcher/local/stack_tree.h"

namespace muster::cli {

std::string stack_report_text(const StackReport& report);
nlohmann::json stack_report_json(const StackReport& report);

}  // namespace muster::cli
