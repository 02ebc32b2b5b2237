// The self-contained bundle muster ships to a node: the muster binary, every shared object
// it loads (found from the running process and the libraries' own DT_NEEDED lists, nothing
// guessed), glibc's dynamic loader, and the hwloc plugins its discovery needs. On the node
// it starts through the bundled loader with an explicit library path, so that neither the
// node's libraries nor its loader are used: a node needs only an x86-64 Linux kernel and sshd.
//
// Layout, in a directory named by the build id:
//   ld.so            glibc's dynamic loader
//   muster           muster-node, the node side of this build (stripped), which muster
//                    carries inside itself (cli/node_image.S), so its build id covers it
//   lib/SONAME       every library muster loads, under the name the loader asks for
//   hwloc/*.so       hwloc's PCI plugin (HWLOC_PLUGINS_PATH points here)
//   build-id         muster's build id, the archive's last member: checked when shipped
//   complete         written last, once the bundle was verified on the node
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace muster {

struct BundleFile {
  std::string name;    // path inside the bundle: "ld.so", "lib/libc.so.6", ...
  std::string source;  // where this process loaded it from
  std::string_view bytes;  // the content itself, when it is in this process's memory
};

// What the bundle of this muster holds, from the running process. Throws Error(Runtime)
// when a library muster needs cannot be found.
std::vector<BundleFile> bundle_files();

// The bundle as a gzip-compressed tar archive (POSIX ustar), as `tar -xzf -` unpacks it.
std::string bundle_archive(const std::vector<BundleFile>& files);

// `muster bundle DIR`: writes the bundle unpacked to DIR/<build id>/ (complete marker
// included) and returns that directory. Throws Error(Runtime) naming what failed.
std::string write_bundle(const std::string& dir);

// The DT_NEEDED entries of an ELF shared object or executable held in `elf`.
std::vector<std::string> needed_libraries(std::string_view elf);

// The GNU build id of an ELF file held in `elf`, in lower-case hex; empty when it has none.
std::string elf_build_id(std::string_view elf);

// muster-node where it is installed beside this muster (build/muster-node in the build
// tree, libexec/muster/muster-node under an install prefix), when its build id is that of
// the node side this muster carries: the agent's binary, without libssh, Kerberos and
// yaml-cpp to load, where the nodes see the same files. Nothing when muster runs from a
// bundle, carries no node side (the tests that link this library), or none is installed.
std::optional<std::string> installed_node_program();

}  // namespace muster
