#include "launcher/remote/bundle.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "launcher/error.h"
#include "launcher/local/rank_stacks.h"
#include "launcher/local/self.h"
#include "topology/topology_source.h"

// muster-node's bytes, which cli/node_image.S puts inside muster; weak, so that the programs
// without them (the tests that link this library) still link.
extern "C" {
__attribute__((weak)) extern const char muster_node_image[];
__attribute__((weak)) extern const char muster_node_image_end[];
}

namespace muster {
namespace {

// A file of the bundle, mapped rather than read: the libraries are megabytes each, and
// reading them whole into the heap made the first ship's head twice its usual size. Only
// the pages looked at (the ELF headers and names, or everything while it is compressed)
// become resident, and only while mapped.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0) {
      const int error = errno;
      if (fd >= 0) close(fd);
      throw Error(ErrorKind::Runtime, fmt::format("cannot read {} for the bundle: {}", path,
                                                  std::strerror(error)));
    }
    size_ = size_t(st.st_size);
    if (size_ > 0) map_ = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    close(fd);
    if (map_ == MAP_FAILED)
      throw Error(ErrorKind::Runtime, fmt::format("cannot map {} for the bundle: {}", path,
                                                  std::strerror(error)));
  }
  ~MappedFile() {
    if (size_ > 0) munmap(map_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const { return {static_cast<const char*>(map_), size_}; }

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
};

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// An ELF file's program headers; none when it is no ELF file or they lie outside it.
std::vector<ElfW(Phdr)> program_headers(std::string_view elf) {
  std::vector<ElfW(Phdr)> headers;
  if (elf.size() < sizeof(ElfW(Ehdr)) || std::memcmp(elf.data(), ELFMAG, SELFMAG) != 0) return headers;
  ElfW(Ehdr) eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  if (eh.e_phentsize != sizeof(ElfW(Phdr))) return headers;
  for (size_t i = 0, at = eh.e_phoff; i < eh.e_phnum && at <= elf.size() && elf.size() - at >= sizeof(ElfW(Phdr));
       ++i, at += sizeof(ElfW(Phdr))) {
    ElfW(Phdr) ph;
    std::memcpy(&ph, elf.data() + at, sizeof ph);
    headers.push_back(ph);
  }
  return headers;
}

// Every shared object this process has loaded, by file name (the name the loader was asked
// for: a soname), with where it came from. The vDSO has no file and is left out.
std::map<std::string, std::string> loaded_objects() {
  std::map<std::string, std::string> out;
  dl_iterate_phdr([](dl_phdr_info* info, size_t, void* data) {
    const std::string name = info->dlpi_name ? info->dlpi_name : "";
    if (!name.empty() && name[0] == '/')
      static_cast<std::map<std::string, std::string>*>(data)->emplace(base_name(name), name);
    return 0;
  }, &out);
  return out;
}

// Where the loader finds `soname` for this process: it is already loaded, or loading it
// says where it is (as ld.so would, from the same search path).
std::string path_of(const std::string& soname, std::map<std::string, std::string>& loaded) {
  if (auto it = loaded.find(soname); it != loaded.end()) return it->second;
  void* handle = dlopen(soname.c_str(), RTLD_LAZY | RTLD_LOCAL);
  link_map* map = nullptr;
  if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name)
    throw Error(ErrorKind::Runtime, fmt::format("cannot find {}, which muster needs, to put it "
                                                "in the bundle: {}", soname, dlerror()));
  return loaded[soname] = map->l_name;
}

// --- tar (POSIX ustar) --------------------------------------------------------------------

void octal(char* field, size_t width, unsigned long long value) {
  std::snprintf(field, width, "%0*llo", int(width - 1), value);
}

// One member's 512-byte header.
std::string tar_header(const std::string& name, char type, size_t size, unsigned mode) {
  if (name.size() >= 100) throw Error(ErrorKind::Runtime, "bundle member name too long: " + name);
  char h[512] = {};
  std::memcpy(h, name.data(), name.size());
  octal(h + 100, 8, mode);
  octal(h + 108, 8, 0);     // uid
  octal(h + 116, 8, 0);     // gid
  octal(h + 124, 12, size);
  octal(h + 136, 12, 0);    // mtime: the same bundle is the same bytes
  h[156] = type;
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h + 148, 8, "%06o", sum);
  h[155] = ' ';
  return std::string(h, sizeof h);
}

// Compresses everything handed to it into one gzip stream.
class GzipWriter {
 public:
  GzipWriter() {
    if (deflateInit2(&z_, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      throw Error(ErrorKind::Runtime, "zlib could not start compressing the bundle");
  }
  ~GzipWriter() { deflateEnd(&z_); }
  // Room for the compressed form of `input` bytes, taken at once: growing the string by
  // doubling would copy the archive several times, with two copies resident at each step.
  // Pages reserved but never written are not resident.
  void reserve(size_t input) { out_.reserve(deflateBound(&z_, uLong(input))); }
  void add(std::string_view bytes) { run(bytes, Z_NO_FLUSH); }
  std::string finish() {
    run({}, Z_FINISH);
    return std::move(out_);
  }

 private:
  void run(std::string_view bytes, int flush) {
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
    z_.avail_in = uInt(bytes.size());
    char chunk[1 << 16];
    int rc;
    do {
      z_.next_out = reinterpret_cast<Bytef*>(chunk);
      z_.avail_out = sizeof chunk;
      rc = deflate(&z_, flush);
      out_.append(chunk, sizeof chunk - z_.avail_out);
    } while (z_.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
  }
  z_stream z_{};
  std::string out_;
};

// Calls `use` with a bundle file's bytes: in this process's memory already, or mapped.
template <typename Use>
void with_contents(const BundleFile& f, Use&& use) {
  if (!f.bytes.empty()) return use(f.bytes);
  MappedFile file(f.source);
  use(file.bytes());
}

// What the bundle's muster is: muster-node, the node side alone, carried inside muster; a
// muster run from a bundle ships the bundle's own. A program without the image (the tests
// that link this library) ships itself, which does the same job with libssh, Kerberos and
// yaml-cpp in tow.
BundleFile bundle_muster() {
  if (muster_bundle_dir()) return {"muster", *muster_bundle_dir() + "/muster", {}};
  const char* begin = muster_node_image;
  const char* end = muster_node_image_end;
  if (begin && end > begin)
    return {"muster", "muster-node inside this muster",
            std::string_view(begin, size_t(end - begin))};
  return {"muster", "/proc/self/exe", {}};
}

}  // namespace

std::vector<std::string> needed_libraries(std::string_view elf) {
  std::vector<std::string> needed;
  const std::vector<ElfW(Phdr)> headers = program_headers(elf);
  // File offset of a virtual address, through the loadable segments.
  auto offset_of = [&](ElfW(Addr) address) -> std::optional<size_t> {
    for (const auto& ph : headers)
      if (ph.p_type == PT_LOAD && address >= ph.p_vaddr && address < ph.p_vaddr + ph.p_filesz)
        return size_t(address - ph.p_vaddr + ph.p_offset);
    return std::nullopt;
  };
  for (const auto& dyn : headers) {
    if (dyn.p_type != PT_DYNAMIC) continue;
    std::vector<size_t> name_offsets;
    std::optional<size_t> strtab;
    for (size_t at = dyn.p_offset; at + sizeof(ElfW(Dyn)) <= elf.size() && at < dyn.p_offset + dyn.p_filesz;
         at += sizeof(ElfW(Dyn))) {
      ElfW(Dyn) d;
      std::memcpy(&d, elf.data() + at, sizeof d);
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED) name_offsets.push_back(d.d_un.d_val);
      if (d.d_tag == DT_STRTAB) strtab = offset_of(d.d_un.d_ptr);
    }
    if (!strtab) break;
    for (size_t offset : name_offsets) {
      size_t start = *strtab + offset;
      if (start >= elf.size()) continue;
      needed.emplace_back(elf.data() + start, strnlen(elf.data() + start, elf.size() - start));
    }
  }
  return needed;
}

std::string elf_build_id(std::string_view elf) {
  for (const auto& ph : program_headers(elf))
    if (ph.p_type == PT_NOTE && ph.p_offset < elf.size())
      if (std::string id = build_id_in_notes(elf.substr(ph.p_offset, ph.p_filesz)); !id.empty()) return id;
  return "";
}

std::optional<std::string> installed_node_program() {
  const char* image = muster_node_image;
  const char* image_end = muster_node_image_end;
  if (muster_bundle_dir() || !image || image_end <= image) return std::nullopt;
  const std::string wanted = elf_build_id(std::string_view(image, size_t(image_end - image)));
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (wanted.empty() || error) return std::nullopt;
  for (const char* beside : {"muster-node", MUSTER_NODE_FROM_BINDIR}) {
    const std::string path = (self.parent_path() / beside).lexically_normal().string();
    if (access(path.c_str(), X_OK) != 0) continue;
    try {
      if (elf_build_id(MappedFile(path).bytes()) == wanted) return path;
    } catch (const Error&) {
      // Unreadable: not this build's, as far as anyone can tell.
    }
  }
  return std::nullopt;
}

std::vector<BundleFile> bundle_files() {
  // The plugins are loaded here and stay loaded, with what they need.
  std::vector<std::string> plugins = hwloc_plugin_files();
  for (const auto& plugin : plugins) dlopen(plugin.c_str(), RTLD_LAZY | RTLD_LOCAL);
  std::map<std::string, std::string> loaded = loaded_objects();

  std::vector<BundleFile> files;
  files.push_back(bundle_muster());
  for (const auto& plugin : plugins) files.push_back({"hwloc/" + base_name(plugin), plugin, {}});

  // Everything the program and the plugins need, and what that needs in turn, and libdw,
  // which muster opens only when it reads a stack (local/rank_stacks.cpp). The loader
  // goes in as ld.so: it is what starts muster on the node.
  std::set<std::string> seen;
  std::deque<std::string> todo = {kLibdwSoname};
  for (const auto& f : files)
    with_contents(f, [&](std::string_view elf) {
      for (auto& name : needed_libraries(elf)) todo.push_back(name);
    });
  while (!todo.empty()) {
    std::string soname = todo.front();
    todo.pop_front();
    if (!seen.insert(soname).second) continue;
    const std::string path = path_of(soname, loaded);
    const bool loader = soname.rfind("ld-linux", 0) == 0;
    files.push_back({loader ? "ld.so" : "lib/" + soname, path, {}});
    for (auto& name : needed_libraries(MappedFile(path).bytes())) todo.push_back(name);
  }
  return files;
}

std::string bundle_archive(const std::vector<BundleFile>& files) {
  GzipWriter gzip;
  size_t input = 0;
  for (const auto& f : files) {
    std::error_code ec;
    const auto size = f.bytes.empty() ? std::filesystem::file_size(f.source, ec) : f.bytes.size();
    if (!ec) input += size + 1024;  // its tar header and padding
  }
  gzip.reserve(input);
  std::set<std::string> dirs;
  for (const auto& f : files) {
    auto slash = f.name.find('/');
    if (slash != std::string::npos && dirs.insert(f.name.substr(0, slash)).second)
      gzip.add(tar_header(f.name.substr(0, slash) + "/", '5', 0, 0755));
  }
  auto add_file = [&](const std::string& name, std::string_view content, unsigned mode) {
    gzip.add(tar_header(name, '0', content.size(), mode));
    gzip.add(content);
    gzip.add(std::string((512 - content.size() % 512) % 512, '\0'));
  };
  for (const auto& f : files) with_contents(f, [&](std::string_view bytes) { add_file(f.name, bytes, 0755); });
  add_file("build-id", muster_build_id() + "\n", 0644);
  gzip.add(std::string(1024, '\0'));  // two empty blocks end the archive
  return gzip.finish();
}

std::string write_bundle(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path target = fs::path(dir) / muster_build_id();
  std::error_code ec;
  fs::create_directories(target / "lib", ec);
  fs::create_directories(target / "hwloc", ec);
  if (ec)
    throw Error(ErrorKind::Runtime, fmt::format("cannot create {}: {}", target.string(), ec.message()));
  auto write = [&](const fs::path& path, std::string_view content, fs::perms perms) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out.write(content.data(), std::streamsize(content.size())) || !out.flush())
      throw Error(ErrorKind::Runtime, fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
    out.close();
    fs::permissions(path, perms, ec);
  };
  const auto executable = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                          fs::perms::others_read | fs::perms::others_exec;
  const auto readable = fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                        fs::perms::others_read;
  for (const auto& f : bundle_files())
    with_contents(f, [&](std::string_view bytes) { write(target / f.name, bytes, executable); });
  write(target / "build-id", muster_build_id() + "\n", readable);
  write(target / "complete", "", readable);
  return target.string();
}

}  // namespace muster
