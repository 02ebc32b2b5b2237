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

// The machine under `root` (/etc/machine-id there), "" when it has none that is safe in a
// file name: a snapshot of another machine, or a node without one.
std::string state_machine_id(const std::string& root);

// A state file of one machine: `stem`.MACHINE-ID.`suffix` ("counters.<id>.baseline"), so that
// nodes whose state directory is one shared home ($XDG_STATE_HOME on NFS, without root) keep
// a file each instead of overwriting one another's; `stem`.`suffix` without a machine-id.
std::string state_file_of_machine(const std::string& root, const std::string& stem, const std::string& suffix);

// read_state_file of this machine's file (state_file_of_machine), else of the one name every
// machine shared before (`stem`.`suffix`): what is in it says whose it is, and the caller
// checks that (a boot id, a machine-id).
std::optional<std::string> read_machine_state_file(const std::string& state_dir, const std::string& root,
                                                   const std::string& stem, const std::string& suffix,
                                                   std::string& why_not);

}  // namespace muster
