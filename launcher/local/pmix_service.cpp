#include "launcher/local/pmix_service.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <pmix.h>
#include <pmix_server.h>
#include <stdlib.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/error.h"
#include "launcher/node_library.h"

namespace muster {

// The entry points of OpenPMIx's server library that muster calls, bound by name: the
// declarations are the library's own headers' (libpmix-dev), the code is the node's.
struct PmixService::Library {
  // Global: its own plugins (pmix_mca_*.so) link against it. Never unloaded: its progress
  // thread outlives any one job, and sanitizers name its allocations by it at exit.
  NodeLibrary library{"libpmix.so.2", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE};
  decltype(&PMIx_server_init) server_init = nullptr;
  decltype(&PMIx_server_finalize) server_finalize = nullptr;
  decltype(&PMIx_server_register_nspace) register_nspace = nullptr;
  decltype(&PMIx_server_deregister_nspace) deregister_nspace = nullptr;
  decltype(&PMIx_server_register_client) register_client = nullptr;
  decltype(&PMIx_server_setup_fork) setup_fork = nullptr;
  decltype(&PMIx_server_dmodex_request) dmodex_request = nullptr;
  decltype(&PMIx_generate_regex) generate_regex = nullptr;
  decltype(&PMIx_generate_ppn) generate_ppn = nullptr;
  decltype(&PMIx_Info_list_start) list_start = nullptr;
  decltype(&PMIx_Info_list_add) list_add = nullptr;
  decltype(&PMIx_Info_list_convert) list_convert = nullptr;
  decltype(&PMIx_Info_list_release) list_release = nullptr;
  decltype(&PMIx_Data_array_destruct) array_destruct = nullptr;
  decltype(&PMIx_Error_string) error_string = nullptr;
  std::string why_not;  // empty once the server runs
  std::string tmpdir;   // the server's own, removed at exit
  int lock_fd = -1;     // holds the flock that tells other servers this directory is alive
  std::shared_ptr<void> topology;  // this process's hwloc topology, lent to the server

  explicit Library(std::shared_ptr<void> hwloc_topology);
  std::string error(pmix_status_t status) const { return error_string ? error_string(status) : std::to_string(status); }
};

namespace {

// The services of the jobs now running, by namespace: the library's upcalls name a namespace.
std::mutex g_services_mutex;
std::map<std::string, PmixService*> g_services;

// A rank called PMIx_Abort (MPI_Abort): the job it belongs to ends with its code and words.
// The rank waits for the callback, then exits on its own.
pmix_status_t on_abort(const pmix_proc_t* proc, void*, int status, const char msg[], pmix_proc_t*, size_t,
                       pmix_op_cbfunc_t cbfunc, void* cbdata) {
  {
    std::lock_guard lock(g_services_mutex);
    if (auto it = g_services.find(proc->nspace); it != g_services.end())
      // Open MPI says "N/A" when MPI_Abort was given no message.
      it->second->aborted(int(proc->rank), status, msg && std::strcmp(msg, "N/A") != 0 ? msg : "");
  }
  if (cbfunc) cbfunc(PMIX_SUCCESS, cbdata);
  return PMIX_SUCCESS;
}

static_assert(std::is_same_v<PmixService::FenceDone, pmix_modex_cbfunc_t>);

// Every rank of a job on this node entered a fence (MPI_Init's modex, MPI_Finalize's, a
// barrier): its data goes to the other nodes through the job's exchange. Only fences over the
// whole job are carried (MPI's own); one over some ranks (MPI_Comm_spawn, PMIx groups) is
// refused and the rank's call fails.
pmix_status_t on_fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t[], size_t, char* data,
                       size_t ndata, pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  if (nprocs != 1 || procs[0].rank != PMIX_RANK_WILDCARD) return PMIX_ERR_NOT_SUPPORTED;
  std::lock_guard lock(g_services_mutex);
  const auto it = g_services.find(procs[0].nspace);
  if (it == g_services.end()) return PMIX_ERR_NOT_FOUND;
  it->second->fenced_here(std::string(data ? data : "", data ? ndata : 0), cbfunc, cbdata);
  return PMIX_SUCCESS;
}

// A rank asked for another rank's data that no fence carried (Open MPI with async modex):
// the node that holds that rank is asked through the job's exchange.
pmix_status_t on_direct_modex(const pmix_proc_t* proc, const pmix_info_t[], size_t, pmix_modex_cbfunc_t cbfunc,
                              void* cbdata) {
  if (proc->rank == PMIX_RANK_WILDCARD || proc->rank > PMIX_RANK_VALID) return PMIX_ERR_NOT_SUPPORTED;
  std::lock_guard lock(g_services_mutex);
  const auto it = g_services.find(proc->nspace);
  if (it == g_services.end()) return PMIX_ERR_NOT_FOUND;
  it->second->wanted_from_elsewhere(int(proc->rank), cbfunc, cbdata);
  return PMIX_SUCCESS;
}

// Another node's request for a rank of this node, answered by this node's library.
struct LocalAnswer {
  std::string nspace;
  int request = 0;
};
void on_local_answer(pmix_status_t status, char* data, size_t size, void* cbdata) {
  std::unique_ptr<LocalAnswer> asked(static_cast<LocalAnswer*>(cbdata));
  std::lock_guard lock(g_services_mutex);
  if (auto it = g_services.find(asked->nspace); it != g_services.end())
    it->second->answered_here(asked->request, status, std::string(data ? data : "", data ? size : 0));
}

// What a completed fence handed libpmix: every node's data, freed once it has read them.
void release_fence_data(void* data) { delete static_cast<std::string*>(data); }

}  // namespace

PmixService::Library::Library(std::shared_ptr<void> hwloc_topology) : topology(std::move(hwloc_topology)) {
  if (!library.loaded()) {
    why_not = "libpmix.so.2 did not load (OpenPMIx is not installed here: apt-get install libpmix2)";
    return;
  }
  const bool bound = library.bind(server_init, "PMIx_server_init") &&
                     library.bind(server_finalize, "PMIx_server_finalize") &&
                     library.bind(register_nspace, "PMIx_server_register_nspace") &&
                     library.bind(deregister_nspace, "PMIx_server_deregister_nspace") &&
                     library.bind(register_client, "PMIx_server_register_client") &&
                     library.bind(setup_fork, "PMIx_server_setup_fork") &&
                     library.bind(dmodex_request, "PMIx_server_dmodex_request") &&
                     library.bind(generate_regex, "PMIx_generate_regex") &&
                     library.bind(generate_ppn, "PMIx_generate_ppn") &&
                     library.bind(list_start, "PMIx_Info_list_start") &&
                     library.bind(list_add, "PMIx_Info_list_add") &&
                     library.bind(list_convert, "PMIx_Info_list_convert") &&
                     library.bind(list_release, "PMIx_Info_list_release") &&
                     library.bind(array_destruct, "PMIx_Data_array_destruct") &&
                     library.bind(error_string, "PMIx_Error_string");
  if (!bound) {
    why_not = "libpmix.so.2 lacks the server functions muster uses (OpenPMIx older than 4)";
    return;
  }
  // The server's rendezvous files and its clients' shared memory live in a directory of its
  // own, readable by this user alone (the ranks run as this user), named for this process.
  remove_pmix_directories_of_dead_servers("/tmp");
  std::string pattern = fmt::format("/tmp/muster-pmix-{}-XXXXXX", getpid());
  if (!mkdtemp(pattern.data())) {
    why_not = fmt::format("cannot make a directory for the PMIx server: {}", strerror(errno));
    return;
  }
  tmpdir = pattern;
  lock_fd = hold_pmix_directory(tmpdir);
  static pmix_server_module_t module = {};
  module.abort = on_abort;
  module.fence_nb = on_fence;
  module.direct_modex = on_direct_modex;
  pmix_info_t info[3] = {};
  std::strncpy(info[0].key, PMIX_SERVER_TMPDIR, PMIX_MAX_KEYLEN);
  info[0].value.type = PMIX_STRING;
  info[0].value.data.string = tmpdir.data();
  std::strncpy(info[1].key, PMIX_SYSTEM_TMPDIR, PMIX_MAX_KEYLEN);
  info[1].value.type = PMIX_STRING;
  info[1].value.data.string = tmpdir.data();
  // Lent this process's topology, the server does not discover the machine again.
  pmix_topology_t lent{const_cast<char*>("hwloc"), topology.get()};
  std::strncpy(info[2].key, PMIX_TOPOLOGY2, PMIX_MAX_KEYLEN);
  info[2].value.type = PMIX_TOPO;
  info[2].value.data.topo = &lent;
  if (const pmix_status_t status = server_init(&module, info, topology ? 3 : 2); status != PMIX_SUCCESS) {
    why_not = fmt::format("the PMIx server did not start: {}", error(status));
    std::filesystem::remove_all(tmpdir);
    tmpdir.clear();
  }
}

int hold_pmix_directory(const std::string& dir) {
  // The lock is taken before the file has its name: a server cleaning up as it starts takes
  // a lock file it can flock for a dead server's, and between this file's creation and its
  // flock it could do so and remove a live directory (four agents starting at once on a
  // /tmp they share did; the job's PMIx registration then failed). Under its name it is
  // held from the first moment; link, unlike rename, refuses a name another server holds.
  const std::string lock = dir + "/" + kPmixLockName, taking = lock + ".taking";
  const int fd = open(taking.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  const bool held = flock(fd, LOCK_EX | LOCK_NB) == 0 && link(taking.c_str(), lock.c_str()) == 0;
  unlink(taking.c_str());
  if (held) return fd;
  close(fd);
  return -1;
}

void remove_pmix_directories_of_dead_servers(const std::string& parent) {
  const std::string prefix = "muster-pmix-";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(parent, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    // A directory of this user's, never a link to one.
    struct stat about {};
    if (lstat(entry.path().c_str(), &about) != 0 || !S_ISDIR(about.st_mode) || about.st_uid != getuid()) continue;
    // Alive while its server holds the lock. A pid would not tell: containers that share
    // /tmp but not a PID namespace see each other's live servers as gone. A directory with
    // no lock yet is a server starting (or one of before the locks), judged by its age.
    const int fd = open((entry.path() / kPmixLockName).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno != ENOENT || std::time(nullptr) - about.st_mtime < kPmixUnlockedGrace.count()) continue;
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      continue;
    }
    std::error_code ignored;
    std::filesystem::remove_all(entry.path(), ignored);
    if (fd >= 0) close(fd);
  }
}

namespace {

// The one server of this process, started on first use and kept: a server library is
// initialised once per process. It stops, and its directory goes, when the process ends.
PmixService::Library& library(std::shared_ptr<void> hwloc_topology = nullptr) {
  static PmixService::Library lib(std::move(hwloc_topology));
  static struct Cleanup {
    ~Cleanup() {
      if (lib.tmpdir.empty()) return;
      lib.server_finalize();
      std::error_code ignored;
      std::filesystem::remove_all(lib.tmpdir, ignored);
      if (lib.lock_fd >= 0) close(lib.lock_fd);
    }
  } cleanup;
  return lib;
}

}  // namespace

std::string PmixService::unavailable_here() {
  const NodeLibrary lib("libpmix.so.2", RTLD_LAZY | RTLD_LOCAL);
  decltype(&PMIx_server_setup_fork) setup_fork = nullptr;
  if (!lib.loaded()) return "libpmix.so.2 did not load (OpenPMIx is not installed here: apt-get install libpmix2)";
  if (!lib.bind(setup_fork, "PMIx_server_setup_fork"))
    return "libpmix.so.2 lacks the server functions muster uses (OpenPMIx older than 4)";
  return "";
}

std::string PmixService::start_server(std::shared_ptr<void> hwloc_topology) {
  return library(std::move(hwloc_topology)).why_not;
}

std::unique_ptr<PmixService> PmixService::start(const PmixJob& job, FenceExchange& exchange, std::string& why_not) {
  const Library& lib = library();
  if (!lib.why_not.empty()) {
    why_not = lib.why_not;
    return nullptr;
  }
  return std::unique_ptr<PmixService>(new PmixService(lib, job, exchange));
}

PmixService::PmixService(const Library& lib, PmixJob job, FenceExchange& exchange)
    : lib_(lib), job_(std::move(job)), exchange_(exchange) {
  // The job's map: its nodes (a regex the library reads back), and which ranks are on each;
  // from them the library derives every rank's local and node rank, its local peers and the
  // node's size, which Open MPI reads at MPI_Init.
  std::vector<std::string> per_node;
  for (const auto& ranks : job_.node_ranks) per_node.push_back(fmt::format("{}", fmt::join(ranks, ",")));
  const std::string hosts = fmt::format("{}", fmt::join(job_.hosts, ","));
  const std::string ppn = fmt::format("{}", fmt::join(per_node, ";"));
  char* node_map = nullptr;
  char* proc_map = nullptr;
  const bool mapped = lib_.generate_regex(hosts.c_str(), &node_map) == PMIX_SUCCESS &&
                      lib_.generate_ppn(ppn.c_str(), &proc_map) == PMIX_SUCCESS;
  const uint32_t size = uint32_t(job_.size), nodes = uint32_t(job_.hosts.size()), appnum = 0;
  void* list = lib_.list_start();
  lib_.list_add(list, PMIX_JOB_SIZE, &size, PMIX_UINT32);
  lib_.list_add(list, PMIX_UNIV_SIZE, &size, PMIX_UINT32);
  lib_.list_add(list, PMIX_MAX_PROCS, &size, PMIX_UINT32);
  lib_.list_add(list, PMIX_NUM_NODES, &nodes, PMIX_UINT32);
  lib_.list_add(list, PMIX_APPNUM, &appnum, PMIX_UINT32);
  lib_.list_add(list, PMIX_JOBID, job_.nspace.c_str(), PMIX_STRING);
  if (mapped) {
    lib_.list_add(list, PMIX_NODE_MAP, node_map, PMIX_REGEX);
    lib_.list_add(list, PMIX_PROC_MAP, proc_map, PMIX_REGEX);
  }
  free(node_map);
  free(proc_map);
  auto array = std::make_unique<pmix_data_array_t>();
  lib_.list_convert(list, array.get());
  lib_.list_release(list);
  if (!mapped) {
    lib_.array_destruct(array.get());
    throw Error(ErrorKind::Runtime, "the PMIx server could not describe the job's nodes");
  }

  pmix_nspace_t nspace = {};
  std::strncpy(nspace, job_.nspace.c_str(), PMIX_MAX_NSLEN);
  const int local = int(job_.node_ranks.at(job_.this_node).size());
  const pmix_status_t status = lib_.register_nspace(nspace, local, static_cast<pmix_info_t*>(array->array),
                                                    array->size, nullptr, nullptr);
  if (status != PMIX_SUCCESS && status != PMIX_OPERATION_SUCCEEDED) {
    lib_.array_destruct(array.get());
    throw Error(ErrorKind::Runtime, fmt::format("the PMIx server did not take job {}: {}", job_.nspace,
                                                lib_.error(status)));
  }
  info_ = array.release();
  // Last, so that nothing above leaves it open: what wakes the job's loop for an abort.
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int saved = errno;
    lib_.deregister_nspace(nspace, nullptr, nullptr);
    lib_.array_destruct(static_cast<pmix_data_array_t*>(info_));
    delete static_cast<pmix_data_array_t*>(info_);
    throw Error(ErrorKind::Runtime, fmt::format("cannot make a pipe for the PMIx server: {}", strerror(saved)));
  }
  std::lock_guard lock(g_services_mutex);
  g_services[job_.nspace] = this;
}

PmixService::~PmixService() {
  {
    std::lock_guard lock(g_services_mutex);
    g_services.erase(job_.nspace);
  }
  // A fence or fetch the job ended in: the library frees what it kept for it; its ranks are
  // gone. No upcall can touch these now: the service left g_services above.
  for (Fence& fence : fences_) fence.done(PMIX_ERR_LOST_CONNECTION, nullptr, 0, fence.cbdata, nullptr, nullptr);
  for (Fetch& fetch : fetches_) fetch.done(PMIX_ERR_LOST_CONNECTION, nullptr, 0, fetch.cbdata, nullptr, nullptr);
  pmix_nspace_t nspace = {};
  std::strncpy(nspace, job_.nspace.c_str(), PMIX_MAX_NSLEN);
  lib_.deregister_nspace(nspace, nullptr, nullptr);  // its clients with it
  if (info_) {
    auto* array = static_cast<pmix_data_array_t*>(info_);
    lib_.array_destruct(array);
    delete array;
  }
  for (int fd : wake_)
    if (fd >= 0) close(fd);
}

void PmixService::prepare(int rank, ProcessSpec& spec) {
  pmix_proc_t proc = {};
  std::strncpy(proc.nspace, job_.nspace.c_str(), PMIX_MAX_NSLEN);
  proc.rank = pmix_rank_t(rank);
  pmix_status_t status = lib_.register_client(&proc, getuid(), getgid(), nullptr, nullptr, nullptr);
  if (status != PMIX_SUCCESS && status != PMIX_OPERATION_SUCCEEDED)
    throw Error(ErrorKind::Runtime, fmt::format("the PMIx server did not take rank {}: {}", rank, lib_.error(status)));
  char** env = nullptr;
  status = lib_.setup_fork(&proc, &env);
  if (status != PMIX_SUCCESS)
    throw Error(ErrorKind::Runtime, fmt::format("the PMIx server did not set up rank {}: {}", rank, lib_.error(status)));
  for (char** entry = env; entry && *entry; ++entry) {
    const std::string text = *entry;
    if (const size_t eq = text.find('='); eq != std::string::npos) spec.env.set(text.substr(0, eq), text.substr(eq + 1));
    free(*entry);
  }
  free(env);
  // Open MPI 4.1 takes a rank without its own daemon's address for a singleton and starts
  // an orted of its own (schizo/orte), as it does a rank inside a Slurm allocation that srun
  // did not serve (schizo/slurm); without those components it asks PMIx, as under srun.
  // muster binds the ranks itself. What the user set (-x, the cluster file) stays.
  for (const auto& [name, value] : {std::pair{"OMPI_MCA_schizo", "^orte,slurm"}, std::pair{"OMPI_MCA_ess", "pmi"},
                                    std::pair{"OMPI_MCA_orte_externally_bound", "1"},
                                    std::pair{"OMPI_MCA_hwloc_base_binding_policy", "none"}})
    if (!spec.env.has(name)) spec.env.set(name, value);
}

std::vector<int> PmixService::descriptors() const {
  if (exchange_.ready_fd() < 0) return {wake_[0]};
  return {wake_[0], exchange_.ready_fd()};
}

void PmixService::aborted(int rank, int status, std::string message) {
  {
    std::lock_guard lock(mutex_);
    if (abort_) return;
    abort_ = Event{rank,
                   fmt::format("rank {} called MPI_Abort with code {}{}", rank, status,
                               message.empty() ? "" : ": " + message),
                   status};
  }
  const char byte = 1;
  (void)!write(wake_[1], &byte, 1);
}

void PmixService::fenced_here(std::string data, FenceDone done, void* cbdata) {
  {
    std::lock_guard lock(mutex_);
    fences_.push_back({fences_begun_++, std::move(data), done, cbdata, false});
  }
  const char byte = 1;
  (void)!write(wake_[1], &byte, 1);
}

// Fences entered here go to the exchange in order; each that came back with every node's
// data goes back to libpmix, which releases the ranks waiting in it.
// The exchange is used outside the lock: sending to the head may wait on it, and libpmix's
// one thread must never wait for that in an upcall (an MPI_Abort would wait with it).
// Only this thread completes fences, so the front's number stays put between the locks.
void PmixService::exchange_fences() {
  std::vector<std::pair<int, std::string>> parts_here;
  std::vector<int> waiting;
  {
    std::lock_guard lock(mutex_);
    for (Fence& fence : fences_) {
      if (!fence.contributed) parts_here.emplace_back(fence.number, std::move(fence.data));
      fence.contributed = true;
      waiting.push_back(fence.number);
    }
  }
  for (auto& [number, part] : parts_here) exchange_.contribute("pmix", number, std::move(part));
  std::vector<std::pair<Fence, std::unique_ptr<std::string>>> done;
  for (int number : waiting) {
    auto parts = exchange_.completed("pmix", number);
    if (!parts) break;
    auto all = std::make_unique<std::string>();
    for (const std::string& part : *parts) *all += part;
    std::lock_guard lock(mutex_);
    done.emplace_back(fences_.front(), std::move(all));
    fences_.pop_front();
  }
  for (auto& [fence, all] : done) {
    std::string* data = all.release();
    fence.done(PMIX_SUCCESS, data->data(), data->size(), fence.cbdata, release_fence_data, data);
  }
}

void PmixService::wanted_from_elsewhere(int rank, FenceDone done, void* cbdata) {
  {
    std::lock_guard lock(mutex_);
    fetches_.push_back({fetches_begun_++, rank, done, cbdata, false});
  }
  const char byte = 1;
  (void)!write(wake_[1], &byte, 1);
}

void PmixService::answered_here(int request, int status, std::string data) {
  {
    std::lock_guard lock(mutex_);
    answers_.emplace_back(request, status, std::move(data));
  }
  const char byte = 1;
  (void)!write(wake_[1], &byte, 1);
}

// Direct modex both ways: this node's ranks' requests go out and their answers come back to
// libpmix; other nodes' requests for this node's ranks go to libpmix, and its answers back.
void PmixService::exchange_fetches() {
  std::vector<std::pair<int, int>> to_ask;  // (id, rank)
  std::vector<int> asked;
  std::deque<std::tuple<int, int, std::string>> answers;
  {
    std::lock_guard lock(mutex_);
    for (Fetch& fetch : fetches_) {
      if (!fetch.asked) to_ask.emplace_back(fetch.id, fetch.rank);
      fetch.asked = true;
      asked.push_back(fetch.id);
    }
    answers.swap(answers_);
  }
  for (const auto& [id, rank] : to_ask) exchange_.fetch(id, rank);
  for (auto& [request, status, data] : answers) exchange_.answer_fetch(request, status, std::move(data));
  std::vector<std::pair<Fetch, FenceExchange::Fetched>> done;
  for (int id : asked)
    if (auto answer = exchange_.fetched(id)) {
      std::lock_guard lock(mutex_);
      for (auto it = fetches_.begin(); it != fetches_.end(); ++it)
        if (it->id == id) {
          done.emplace_back(*it, std::move(*answer));
          fetches_.erase(it);
          break;
        }
    }
  for (auto& [fetch, answer] : done) {
    auto* data = new std::string(std::move(answer.data));
    fetch.done(answer.status, data->data(), data->size(), fetch.cbdata, release_fence_data, data);
  }
  for (const auto& [request, rank] : exchange_.take_fetch_requests()) {
    pmix_proc_t proc = {};
    std::strncpy(proc.nspace, job_.nspace.c_str(), PMIX_MAX_NSLEN);
    proc.rank = pmix_rank_t(rank);
    auto asked = std::make_unique<LocalAnswer>(LocalAnswer{job_.nspace, request});
    const pmix_status_t status = lib_.dmodex_request(&proc, on_local_answer, asked.get());
    if (status == PMIX_SUCCESS) asked.release();  // the callback owns it now
    else exchange_.answer_fetch(request, status, "");
  }
}

std::vector<RankService::Event> PmixService::serve() {
  char drain[64];
  while (read(wake_[0], drain, sizeof drain) > 0) {
  }
  exchange_fences();
  exchange_fetches();
  std::lock_guard lock(mutex_);
  if (!abort_ || abort_said_) return {};
  abort_said_ = true;
  return {*abort_};
}

std::string PmixService::waiting_on() const {
  std::lock_guard lock(const_cast<std::mutex&>(mutex_));
  if (fences_.empty()) return "";
  return fmt::format("PMIx fence {} (MPI_Init's, MPI_Finalize's or a barrier): every rank here entered it; "
                     "other nodes' ranks had not",
                     fences_.front().number + 1);
}

}  // namespace muster
