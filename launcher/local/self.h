// This muster process: its build's identity, how it was started (directly, or from a
// self-contained bundle through the bundle's own dynamic loader), how to start it again on
// this node (for probe ranks), and the node's environment without what muster added for
// itself, which is what ranks inherit.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/cluster/environment.h"

namespace muster {

// The environment variable the bundle's start command sets to the bundle's directory.
inline constexpr const char* kBundleVariable = "MUSTER_BUNDLE";

// Called first thing in main: notes whether muster runs from a bundle (and takes
// kBundleVariable out of the environment, so that nothing of it reaches the ranks), and
// points hwloc at the bundle's plugins.
void note_how_muster_started();

// Called by the agent before it starts any thread (hwloc reads the variable when it first
// loads its plugins): hwloc then leaves out the plugins whose libraries (X11, libxml2 and
// ICU) cost every node's agent a quarter of its start, in page faults alone, for nothing it
// reads. A node's own HWLOC_PLUGINS_BLACKLIST stands; the ranks do not inherit muster's.
void skip_hwloc_plugins_the_agent_does_not_read();

// Started from a bundle, muster's command line is the bundle's loader and its options; this
// rewrites it in place to "muster ARGS..." (as ps shows it), the way daemons set their
// titles. Call once the arguments have been parsed: argv's strings are overwritten.
void show_as_muster(int argc, char** argv);

// The ELF build id of this muster (lower-case hex): the bundle is cached by it. Read from
// the running program's notes, not from its file.
const std::string& muster_build_id();

// The NT_GNU_BUILD_ID note among an ELF file's notes (a PT_NOTE segment's bytes), in
// lower-case hex; empty when there is none.
std::string build_id_in_notes(std::string_view notes);

// The bundle directory this muster runs from, if it runs from one.
const std::optional<std::string>& muster_bundle_dir();

// The file to execute, the arguments before muster's own and the environment entries that
// start this very muster again on this node: the bundle's loader and library path, or
// /proc/self/exe (the running binary even when its file has since been replaced).
struct SelfCommand {
  std::string program;
  std::vector<std::string> argv;  // starts with "muster", what ps shows
  std::vector<std::pair<std::string, std::string>> env;
};
SelfCommand self_command();

// The environment muster was started with, less what it set for itself: what a rank on
// this node inherits.
Environment node_environment();

}  // namespace muster
