// Building remote shell command lines safely: every argument quoted on its own.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace muster {

// `text` as one POSIX shell word that the shell passes through unchanged: single quotes,
// with each ' written as '\''. Nothing inside is expanded.
std::string shell_quote(std::string_view text);

// The command line a remote shell runs as exactly `argv`.
std::string shell_command(const std::vector<std::string>& argv);

}  // namespace muster
