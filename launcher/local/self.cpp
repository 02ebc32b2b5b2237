#include "launcher/local/self.h"

#include <elf.h>
#include <link.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <cstring>

#include <fmt/format.h>

#include "probes/digest.h"

namespace muster {
namespace {

struct HowStarted {
  std::optional<std::string> bundle_dir;
  std::optional<std::string> hwloc_plugins_path;  // the node's own value, if any
  bool hwloc_blacklist_set = false;               // by muster: the ranks do not inherit it
};

// hwloc's plugins the agent reads nothing from: X displays (NV-CONTROL) and libxml2, which
// load libX11 and ICU. A shipped bundle carries only the PCI plugin in any case.
constexpr const char* kPluginsTheAgentSkips = "hwloc_gl,hwloc_xml_libxml";

HowStarted& how_started() {
  static HowStarted how;
  return how;
}

// NT_GNU_BUILD_ID in the main program's PT_NOTE segments.
int find_build_id(dl_phdr_info* info, size_t, void* out) {
  auto* id = static_cast<std::string*>(out);
  for (int i = 0; i < info->dlpi_phnum && id->empty(); ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_NOTE)
      *id = build_id_in_notes({reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr), ph.p_memsz});
  }
  return 1;  // only the first object, the main program, is of interest
}

}  // namespace

std::string build_id_in_notes(std::string_view notes) {
  auto aligned = [](size_t n) { return (n + 3) & ~size_t(3); };
  for (size_t at = 0; at + sizeof(ElfW(Nhdr)) <= notes.size();) {
    ElfW(Nhdr) note;
    std::memcpy(&note, notes.data() + at, sizeof note);
    const size_t name_at = at + sizeof note, desc_at = name_at + aligned(note.n_namesz);
    if (desc_at > notes.size() || note.n_descsz > notes.size() - desc_at) break;
    if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 && std::memcmp(notes.data() + name_at, "GNU", 4) == 0)
      return to_hex(notes.substr(desc_at, note.n_descsz));
    at = desc_at + aligned(note.n_descsz);
  }
  return "";
}

void note_how_muster_started() {
  HowStarted& how = how_started();
  if (const char* dir = std::getenv(kBundleVariable); dir && *dir) {
    how.bundle_dir = dir;
    if (const char* plugins = std::getenv("HWLOC_PLUGINS_PATH")) how.hwloc_plugins_path = plugins;
    // Debian's hwloc finds PCI devices (GPUs, NICs) through a plugin: the bundle's own.
    setenv("HWLOC_PLUGINS_PATH", (std::string(dir) + "/hwloc").c_str(), 1);
  }
  unsetenv(kBundleVariable);
}

void skip_hwloc_plugins_the_agent_does_not_read() {
  if (std::getenv("HWLOC_PLUGINS_BLACKLIST")) return;  // the node's own choice stands
  setenv("HWLOC_PLUGINS_BLACKLIST", kPluginsTheAgentSkips, 1);
  how_started().hwloc_blacklist_set = true;
}

void show_as_muster(int argc, char** argv) {
  if (!muster_bundle_dir() || argc < 1) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string current((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The kernel shows the memory from the first argument's start to the last one's end.
  char* end = argv[argc - 1] + std::strlen(argv[argc - 1]) + 1;
  char* start = end - current.size();
  if (current.empty() || start > argv[0]) return;
  std::string title = "muster";
  for (int i = 1; i < argc; ++i) title += std::string(1, '\0') + argv[i];
  if (title.size() + 1 > current.size()) return;
  std::memset(start, 0, current.size());
  std::memcpy(start, title.data(), title.size());
}

const std::string& muster_build_id() {
  static const std::string id = [] {
    std::string found;
    dl_iterate_phdr(find_build_id, &found);
    return found.empty() ? std::string("unknown") : found;
  }();
  return id;
}

const std::optional<std::string>& muster_bundle_dir() { return how_started().bundle_dir; }

SelfCommand self_command() {
  SelfCommand c;
  if (const auto& dir = muster_bundle_dir()) {
    c.program = *dir + "/ld.so";
    c.argv = {"muster", "--library-path", *dir + "/lib", "--argv0", "muster", *dir + "/muster"};
    c.env = {{kBundleVariable, *dir}};
  } else {
    c.program = "/proc/self/exe";
    c.argv = {"muster"};
  }
  return c;
}

Environment node_environment() {
  Environment env = Environment::current();
  const HowStarted& how = how_started();
  if (how.bundle_dir) {
    if (how.hwloc_plugins_path) env.set("HWLOC_PLUGINS_PATH", *how.hwloc_plugins_path);
    else env.unset("HWLOC_PLUGINS_PATH");
  }
  if (how.hwloc_blacklist_set) env.unset("HWLOC_PLUGINS_BLACKLIST");
  return env;
}

}  // namespace muster
