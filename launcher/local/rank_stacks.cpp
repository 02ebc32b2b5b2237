// The one file that includes libdw (elfutils): unwinding a held process's threads.
#include "launcher/local/rank_stacks.h"

#include <cxxabi.h>
#include <dirent.h>
#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cctype>
#include <map>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/error.h"
#include "launcher/text_bytes.h"
#include "launcher/local/posix_spawner.h"
#include "launcher/local/python_frames.h"
#include "launcher/node_library.h"

namespace muster {
namespace {

using Clock = std::chrono::steady_clock;

// libdw (elfutils), opened the first time a stack is read rather than linked: loaded at
// start, it and the four libraries it needs (libelf, zlib, liblzma, libbz2) were bound on
// every start of muster, of each agent and of each smoke rank, for what most runs never ask
// (muster-node --version: 346 page faults instead of 389, 5.4 ms of CPU instead of 5.9,
// medians of eight alternating batches). Opened by the loader's own search: the bundle's
// copy on a node (the bundle carries it, launcher/remote/bundle.cpp), the system's where
// muster is installed.
class Libdw {
 public:
  static const Libdw& instance() {
    static const Libdw lib;
    return lib;
  }
  // Why stacks cannot be read here ("" when they can).
  const std::string& why_not() const { return why_not_; }

 private:
  Libdw() {
    if (!library_.loaded()) why_not_ = fmt::format("{} (elfutils) did not load: {}", kLibdwSoname, dlerror());
    else if (!complete_) why_not_ = fmt::format("{} (elfutils) lacks an entry point muster uses", kLibdwSoname);
  }
  template <typename Fn>
  Fn bind(const char* symbol) {
    Fn fn = nullptr;
    complete_ &= library_.bind(fn, symbol);
    return fn;
  }
  // Never closed: a Dwfl's callbacks point into it.
  NodeLibrary library_ = NodeLibrary::musters_own(kLibdwSoname, RTLD_NOW | RTLD_LOCAL, NodeLibrary::Close::Never);
  bool complete_ = true;
  std::string why_not_;

 public:
// One entry point of libdw, bound by its name: dwfl_NAME as NAME.
#define MUSTER_LIBDW_ENTRY(name) decltype(&::dwfl_##name) name = bind<decltype(&::dwfl_##name)>("dwfl_" #name)
  MUSTER_LIBDW_ENTRY(frame_pc);
  MUSTER_LIBDW_ENTRY(thread_tid);
  MUSTER_LIBDW_ENTRY(thread_getframes);
  MUSTER_LIBDW_ENTRY(addrmodule);
  MUSTER_LIBDW_ENTRY(module_addrname);
  MUSTER_LIBDW_ENTRY(module_info);
  MUSTER_LIBDW_ENTRY(getmodules);
  MUSTER_LIBDW_ENTRY(module_getelf);
  MUSTER_LIBDW_ENTRY(module_eh_cfi);
  MUSTER_LIBDW_ENTRY(module_getsymtab);
  MUSTER_LIBDW_ENTRY(module_getsym_info);
  MUSTER_LIBDW_ENTRY(linux_proc_find_elf);
  MUSTER_LIBDW_ENTRY(standard_find_debuginfo);
  MUSTER_LIBDW_ENTRY(begin);
  MUSTER_LIBDW_ENTRY(end);
  MUSTER_LIBDW_ENTRY(linux_proc_report);
  MUSTER_LIBDW_ENTRY(report_end);
  MUSTER_LIBDW_ENTRY(errmsg);
  MUSTER_LIBDW_ENTRY(linux_proc_attach);
  MUSTER_LIBDW_ENTRY(getthreads);
#undef MUSTER_LIBDW_ENTRY
};

std::vector<pid_t> threads_of(pid_t pid) {
  std::vector<pid_t> tids;
  DIR* dir = opendir(fmt::format("/proc/{}/task", pid).c_str());
  if (!dir) return tids;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long tid = std::strtol(entry->d_name, &end, 10);
    if (tid > 0 && *end == '\0') tids.push_back(pid_t(tid));
  }
  closedir(dir);
  std::sort(tids.begin(), tids.end());
  // The main thread first: it is the one a rank's place is judged by.
  std::stable_partition(tids.begin(), tids.end(), [&](pid_t t) { return t == pid; });
  if (tids.size() > kMaxStackThreads) tids.resize(kMaxStackThreads);
  return tids;
}

ProcessStacks gone() { return {ProcessStacks::State::Gone, "the process has ended", {}}; }

// What could not be done to `pid`, `why`; or that it has ended, when that is why.
ProcessStacks failed_unless_gone(pid_t pid, std::string why) {
  if (kill(pid, 0) != 0) return gone();
  return {ProcessStacks::State::Failed, std::move(why), {}};
}

std::string clipped(std::string text) {
  if (text.size() > kMaxFrameText)
    text = text.substr(0, character_boundary(text, kMaxFrameText - 3, false)) + "...";
  return text;
}

// A C++ symbol as people read it, its template and parameter lists left out: two ranks in the
// same function are in the same place, whatever they instantiated.
std::string readable_symbol(const char* versioned) {
  // "clock_nanosleep@GLIBC_2.2.5": the version says nothing of where the thread is.
  const std::string name(versioned, std::strcspn(versioned, "@"));
  const char* symbol = name.c_str();
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(symbol, nullptr, nullptr, &status),
                                                         &std::free);
  if (status != 0 || !demangled) return clipped(symbol);
  std::string text = demangled.get();
  std::string out;
  int depth = 0;
  for (char c : text) {
    if (c == '<' || c == '(') ++depth;
    if (depth == 0) out += c;
    if ((c == '>' || c == ')') && depth > 0) --depth;
  }
  if (out.empty()) out = text;
  return clipped(out);
}

// A thread held by us: stopped in a ptrace stop, or gone; and the signal it was about to take,
// which it is given back when released.
struct Held {
  pid_t tid = 0;
  bool stopped = false;
  int pending_signal = 0;
};

// Waits, without reaping anything (WNOWAIT), for each seized thread's stop until `deadline`.
void wait_for_stops(std::vector<Held>& held, Clock::time_point deadline) {
  for (;;) {
    bool all = true;
    for (Held& h : held) {
      if (h.stopped) continue;
      siginfo_t info{};
      if (waitid(P_PID, id_t(h.tid), &info, WSTOPPED | WEXITED | WNOWAIT | WNOHANG | __WALL) == 0 &&
          info.si_pid == h.tid && info.si_code == CLD_TRAPPED) {
        h.stopped = true;
        // A signal-delivery stop (no event in the high bits): the signal goes back on release.
        if ((info.si_status >> 8) == 0) h.pending_signal = info.si_status & 0x7f;
        continue;
      }
      all = false;
    }
    if (all || Clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Each stopped thread's return addresses, innermost first, as read while it was held:
// naming them (symbol tables, demangling) waits until it runs again.
struct Unwind {
  std::map<pid_t, std::vector<Dwarf_Addr>> pcs;
};

int on_frame(Dwfl_Frame* frame, void* arg) {
  const Libdw& dw = Libdw::instance();
  auto* pcs = static_cast<std::vector<Dwarf_Addr>*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dw.frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
  // A return address points after the call: the caller is the instruction before it.
  pcs->push_back(activation ? pc : pc - 1);
  return pcs->size() >= kMaxStackFrames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

int on_thread(Dwfl_Thread* thread, void* arg) {
  const Libdw& dw = Libdw::instance();
  auto* unwind = static_cast<Unwind*>(arg);
  const auto stopped = unwind->pcs.find(dw.thread_tid(thread));
  if (stopped == unwind->pcs.end()) return DWARF_CB_OK;
  dw.thread_getframes(thread, on_frame, &stopped->second);  // a frame it cannot step past ends the path
  return DWARF_CB_OK;
}

std::string frame_name(Dwfl* dwfl, Dwarf_Addr at) {
  const Libdw& dw = Libdw::instance();
  Dwfl_Module* module = dw.addrmodule(dwfl, at);
  if (const char* symbol = module ? dw.module_addrname(module, at) : nullptr) return readable_symbol(symbol);
  const char* module_name =
      module ? dw.module_info(module, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr) : nullptr;
  std::string base = module_name ? module_name : "";
  if (auto slash = base.rfind('/'); slash != std::string::npos) base = base.substr(slash + 1);
  return clipped(fmt::format("?? ({})", base.empty() ? "no module" : base));
}

// What is learnt of the process's modules before it is held: each one's ELF file and call
// frame information are loaded (the unwinder needs them), and the interpreter, if one is
// there, is found by its file's name (python3.11, libpython3.11.so.1.0) with its _PyRuntime.
struct ModuleScan {
  std::string python_version;  // "" when no module is CPython's
  uint64_t python_runtime = 0;  // 0 when not found (or not 3.11, which is all that is read)
};

ModuleScan scan_modules(Dwfl* dwfl) {
  const Libdw& dw = Libdw::instance();
  ModuleScan scan;
  dw.getmodules(
      dwfl,
      [](Dwfl_Module* module, void**, const char* name, Dwarf_Addr, void* arg) -> int {
        const Libdw& dw = Libdw::instance();
        Dwarf_Addr bias = 0;
        dw.module_getelf(module, &bias);
        dw.module_eh_cfi(module, &bias);
        auto& scan = *static_cast<ModuleScan*>(arg);
        const char* at = name ? std::strstr(name, "python3.") : nullptr;
        if (!at) return DWARF_CB_OK;
        const char* end = at + 8;
        while (std::isdigit(static_cast<unsigned char>(*end))) ++end;
        if (scan.python_version.empty()) scan.python_version.assign(at + 6, end);
        if (scan.python_runtime || std::string_view(at + 6, size_t(end - at - 6)) != "3.11") return DWARF_CB_OK;
        const int count = dw.module_getsymtab(module);
        for (int i = 0; i < count; ++i) {
          GElf_Sym sym;
          GElf_Addr address = 0;
          const char* symbol = dw.module_getsym_info(module, i, &sym, &address, nullptr, nullptr, nullptr);
          if (symbol && std::strcmp(symbol, "_PyRuntime") == 0) {
            scan.python_runtime = address;
            break;
          }
        }
        return DWARF_CB_OK;
      },
      &scan, 0);
  return scan;
}

// The native frames of a Python thread that lie below the interpreter (the C function it
// called), innermost first, without the interpreter's own calling machinery
// (PyObject_Vectorcall, _PyFunction_Vectorcall) and the frames no symbol names.
std::vector<std::string> below_the_interpreter(const std::vector<std::string>& native) {
  std::vector<std::string> out;
  for (const auto& frame : native) {
    if (frame.rfind("_PyEval_EvalFrame", 0) == 0) break;
    if (frame.rfind("?? ", 0) != 0 && frame.rfind("Py", 0) != 0 && frame.rfind("_Py", 0) != 0)
      out.push_back(frame);
  }
  return out;
}

}  // namespace

ProcessStacks capture_process_stacks(pid_t pid, std::chrono::milliseconds limit, std::optional<pid_t> parent) {
  const auto started = Clock::now();
  ProcessStacks out;
  const auto stat = read_proc_stat(pid);
  if (!stat || stat->state == 'Z' || stat->state == 'X' || (parent && stat->ppid != *parent)) return gone();

  const Libdw& dw = Libdw::instance();
  if (!dw.why_not().empty()) return failed_unless_gone(pid, "cannot unwind stacks here: " + dw.why_not());

  // Before the process is held: its modules, their files and where its interpreter is.
  static char* debuginfo_path = nullptr;
  static const Dwfl_Callbacks callbacks = {dw.linux_proc_find_elf, dw.standard_find_debuginfo, nullptr,
                                           &debuginfo_path};
  std::unique_ptr<Dwfl, decltype(dw.end)> dwfl(dw.begin(&callbacks), dw.end);
  if (!dwfl || dw.linux_proc_report(dwfl.get(), pid) != 0 || dw.report_end(dwfl.get(), nullptr, nullptr) != 0)
    return failed_unless_gone(pid, fmt::format("cannot read its modules: {}", dw.errmsg(-1)));
  const ModuleScan modules = scan_modules(dwfl.get());
  std::string python_note;
  if (!modules.python_version.empty() && modules.python_version != "3.11")
    python_note =
        fmt::format("Python frames not read: muster reads CPython 3.11's, this is {}", modules.python_version);
  else if (!modules.python_version.empty() && !modules.python_runtime)
    python_note = "Python frames not read: the interpreter does not export _PyRuntime";

  // Held: what is left of `limit` to stop (never less than a few milliseconds), then only
  // the reads of its memory that must see it still.
  const auto deadline = std::max(started + limit, Clock::now() + std::chrono::milliseconds(20));
  const auto hold_began = Clock::now();
  std::vector<Held> held;
  for (pid_t tid : threads_of(pid)) {
    if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) continue;
    held.push_back({tid});
    ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
  }
  if (held.empty()) return failed_unless_gone(pid, fmt::format("cannot trace it: {}", std::strerror(errno)));
  Unwind unwind;
  std::vector<PythonThread> python;
  {
    // Whatever happens in here, every held thread is let go (with the signal it was to take).
    struct Release {
      std::vector<Held>& held;
      ~Release() {
        for (const Held& h : held)
          ptrace(PTRACE_DETACH, h.tid, nullptr, reinterpret_cast<void*>(long(h.pending_signal)));
      }
    } release{held};
    wait_for_stops(held, deadline);
    for (const Held& h : held)
      if (h.stopped) unwind.pcs[h.tid];
    if (dw.linux_proc_attach(dwfl.get(), pid, true) != 0)
      return failed_unless_gone(pid, fmt::format("cannot unwind it: {}", dw.errmsg(-1)));
    dw.getthreads(dwfl.get(), on_thread, &unwind);
    if (modules.python_version == "3.11" && modules.python_runtime) {
      try {
        python = read_python_threads(
            modules.python_runtime,
            [pid](uint64_t address, void* into, size_t size) {
              iovec local{into, size}, remote{reinterpret_cast<void*>(address), size};
              return process_vm_readv(pid, &local, 1, &remote, 1, 0) == ssize_t(size);
            },
            kMaxStackThreads, kMaxPythonFrames);
      } catch (const Error& e) {
        python_note = std::string("Python frames not read: ") + e.what();
      }
    }
  }

  out.held_ms = std::chrono::duration<double, std::milli>(Clock::now() - hold_began).count();
  // Released: the addresses are named from the modules' files.
  std::vector<std::string> not_stopped, unread;
  for (const Held& h : held) {
    if (!h.stopped) {
      if (kill(h.tid, 0) == 0) not_stopped.push_back(std::to_string(h.tid));
      continue;
    }
    ThreadStack thread;
    thread.tid = h.tid;
    std::vector<std::string> native;  // innermost first
    for (Dwarf_Addr at : unwind.pcs[h.tid]) native.push_back(frame_name(dwfl.get(), at));
    const auto py = std::find_if(python.begin(), python.end(),
                                 [&](const PythonThread& t) { return t.native_tid == uint64_t(h.tid); });
    if (py != python.end() && !py->frames.empty()) {
      thread.frames = py->frames;
      const auto below = below_the_interpreter(native);
      thread.frames.insert(thread.frames.end(), below.rbegin(), below.rend());
    } else {
      thread.frames.assign(native.rbegin(), native.rend());
    }
    if (native.empty()) unread.push_back(std::to_string(h.tid));
    out.threads.push_back(std::move(thread));
  }
  if (!not_stopped.empty())
    out.note = fmt::format("threads {} did not stop within {} ms", fmt::join(not_stopped, ", "), limit.count());
  if (!unread.empty()) {
    const std::string note = fmt::format("no native frame of threads {} could be read", fmt::join(unread, ", "));
    out.note = out.note.empty() ? note : out.note + "; " + note;
  }
  if (!python_note.empty()) out.note = out.note.empty() ? python_note : out.note + "; " + python_note;
  if (out.threads.empty() && kill(pid, 0) != 0) return gone();
  return out;
}

}  // namespace muster
