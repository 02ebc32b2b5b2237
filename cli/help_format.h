// --help laid out for an 80-column terminal: option descriptions, the command list, the
// description and the footer wrapped at word boundaries, as man(1) and git's help are.
#pragma once

#include <memory>

namespace CLI {
class Formatter;
}

namespace muster::cli {

// The formatter for muster's --help; given to the top-level app before its subcommands are
// added, so that each of them inherits it.
std::shared_ptr<CLI::Formatter> help_formatter();

}  // namespace muster::cli
