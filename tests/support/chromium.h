// Debian's chromium, headless, as the tests' real browser: the DOM it builds from a page,
// and a screenshot of it. Started as the tool library's probe starts it as root: no sandbox,
// no GPU, a fresh profile, and no background fetches (this machine has no internet).
#pragma once

#include <string>

#include "tests/support/command_runner.h"

namespace muster::testing {

// Why chromium cannot run here ("" when it can).
std::string chromium_unavailable();

// The DOM chromium built from the local file `page`, serialised (--dump-dom).
CommandResult chromium_dom(const std::string& page);

// How many times `what` occurs in a DOM (or any text): cells, outlines, rows.
size_t occurrences(const std::string& dom, const std::string& what);

// A PNG of `page` at `width` x `height` pixels written to `png`.
CommandResult chromium_screenshot(const std::string& page, const std::string& png, int width = 1400,
                                  int height = 1600);

}  // namespace muster::testing
