// What muster remembers of a node between runs, per boot: the counts of counters that only
// grow (AER errors, Xids) that an operator accepted or a healthy run saw, so that a later
// run judges only what is new. Kept in a state directory owned by the user, written whole
// (a temporary file renamed over the old one), read bounded.
#pragma once

#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>

namespace muster {

// The state directory: $MUSTER_STATE_DIR; else /var/lib/muster as root; else
// $XDG_STATE_HOME/muster; else ~/.local/state/muster.
std::string health_state_dir();

// The counts of one boot, by key ("aer/0000:18:00.0/aer_dev_fatal", "xid/0000:2a:00.0/79").
struct CounterBaseline {
  std::string boot_id;         // /proc/sys/kernel/random/boot_id of the boot it belongs to
  std::time_t recorded_at = 0;  // when it was written
  std::map<std::string, std::uint64_t> counts;
};

// The node's boot id read under `root` (a snapshot's own under --fsroot); nullopt when
// unreadable.
std::optional<std::string> read_boot_id(const std::string& root);

// The baseline kept in `state_dir` for the machine under `root` (a file of its own, named
// for its machine-id: nodes may share one state directory), whatever its boot; nullopt with
// `why_not` set when there is none ("" then) or it cannot be trusted (a symlink, another
// user's, too big, malformed).
std::optional<CounterBaseline> load_counter_baseline(const std::string& state_dir, const std::string& root,
                                                     std::string& why_not);

// Writes `baseline` of the machine under `root` into `state_dir` (made 0700 if missing),
// replacing the old one at once; false with `why_not` set when the directory is unsafe (a
// symlink, another user's, writable by others) or the write failed.
bool save_counter_baseline(const std::string& state_dir, const std::string& root, const CounterBaseline& baseline,
                           std::string& why_not);

// "2026-11-27 14:40:05 UTC".
std::string baseline_time_text(std::time_t t);

}  // namespace muster
