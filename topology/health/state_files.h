// muster's state directory on a node (health_state_dir()): small files written whole (a
// temporary file renamed over the old one, 0600, in a directory made 0700) and read bounded,
// in a directory that is this user's alone. Internal to topology/health/.
#pragma once

#include <optional>
#include <string>

namespace muster {

// The text of `state_dir`/`name`; nullopt with `why_not` "" when there is none, or set when
// it cannot be trusted (a symlink, another user's, over 4 MiB).
std::optional<std::string> read_state_file(const std::string& state_dir, const std::string& name,
                                           std::string& why_not);

// Replaces `state_dir`/`name` with `text` at once, making the directory if missing; false
// with `why_not` set when the directory is unsafe (a symlink, another user's, writable by
// others) or the write failed.
bool write_state_file(const std::string& state_dir, const std::string& name, const std::string& text,
                      std::string& why_not);

}  // namespace muster
