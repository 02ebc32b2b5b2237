// A fake NCCL (libnccl.so.2), compiled against the real nccl.h so that every signature,
// type, enum value and struct size is the real ABI's. It runs real collectives between
// processes (or threads) over TCP: ncclGetUniqueId starts a bootstrap root and carries its
// address inside the ncclUniqueId, as NCCL does; ncclCommInitRank registers with it, learns
// every rank's address and connects a full mesh. Collectives are queued on the fake CUDA
// runtime's stream and run there, asynchronously.
//
// Told per rank (RANK in the environment) through the environment, it misbehaves as NCCL
// can: MUSTER_FAKE_NCCL_HANG=R:N (rank R's Nth collective, counted over the process, never
// returns to its caller, as a hung host thread), MUSTER_FAKE_NCCL_ASYNC_ERROR=R:N (from its Nth collective on, rank R's
// communicator reports ncclSystemError, as for a failed NIC, and its work never completes
// until it is aborted; its peers then lose their connections and report ncclRemoteError), and
// MUSTER_FAKE_NCCL_INIT_FAIL=R (ncclCommInitRank fails with ncclSystemError) and
// MUSTER_FAKE_NCCL_INIT_HANG=R (rank R never completes its init, as when its bootstrap cannot
// reach the others: blocking, the call never returns; non-blocking, ncclCommGetAsyncError
// says ncclInProgress until ncclCommAbort). A config with blocking = 0 makes the communicator
// non-blocking, as NCCL's does: its init returns ncclInProgress and completes in the background.
// MUSTER_FAKE_NCCL_LOG=FILE records "RANK event" lines: init (on the current device's bus id),
// hang, async-error, abort, destroy, and queued-behind (see enqueue).
#include <nccl.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern "C" int muster_fake_cuda_enqueue(cudaStream_t stream, void (*run)(void*), void* arg);

static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES);

namespace {

// --- the environment's instructions -------------------------------------------------------

int my_rank() {
  const char* rank = std::getenv("RANK");
  return rank ? std::atoi(rank) : -1;
}

// "R:N" for this rank: N; else -1.
int nth_for_me(const char* variable) {
  const char* value = std::getenv(variable);
  if (!value) return -1;
  int rank = -1, nth = -1;
  if (std::sscanf(value, "%d:%d", &rank, &nth) != 2 || rank != my_rank()) return -1;
  return nth;
}

void log_event(const char* event) {
  const char* path = std::getenv("MUSTER_FAKE_NCCL_LOG");
  if (!path) return;
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%d %s\n", my_rank(), event);
    std::fclose(f);
  }
}

// Every collective this process issues, counted for the instructions above.
std::atomic<int> g_collectives{0};

// --- sockets ------------------------------------------------------------------------------

// This process's address: NCCL_SOCKET_IFNAME's interface ("=name" exact, else a prefix),
// else the first interface that is up and not loopback, else loopback.
std::uint32_t pick_address() {
  const char* wanted_env = std::getenv("NCCL_SOCKET_IFNAME");
  std::string wanted = wanted_env ? wanted_env : "";
  const bool exact = !wanted.empty() && wanted[0] == '=';
  if (exact) wanted = wanted.substr(1);
  std::uint32_t found = htonl(INADDR_LOOPBACK);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
    const std::string name = a->ifa_name;
    const bool matches = wanted.empty() ? !(a->ifa_flags & IFF_LOOPBACK)
                                        : exact ? name == wanted : name.rfind(wanted, 0) == 0;
    if (!matches) continue;
    found = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
    break;
  }
  freeifaddrs(list);
  return found;
}

int listen_on(std::uint32_t address, std::uint16_t& port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = address;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 1024) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  port = addr.sin_port;  // network order
  return fd;
}

int connect_to(std::uint32_t address, std::uint16_t port) {
  for (int attempt = 0; attempt < 600; ++attempt) {  // the peer may not listen yet: 60 s
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = address;
    addr.sin_port = port;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      int yes = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
      return fd;
    }
    close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

bool send_all(int fd, const void* data, size_t size) {
  auto p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    p += n;
    size -= size_t(n);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t size) {
  auto p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = recv(fd, p, size, 0);
    if (n <= 0) return false;
    p += n;
    size -= size_t(n);
  }
  return true;
}

// --- the bootstrap, carried in ncclUniqueId -----------------------------------------------

struct IdContents {
  char magic[4];  // "MFNC"
  std::uint32_t address;
  std::uint16_t port;
  std::uint64_t token;
};

struct Registration {
  std::uint64_t token;
  std::int32_t rank, nranks;
  std::uint32_t address;
  std::uint16_t port;
} __attribute__((packed));

struct Endpoint {
  std::uint32_t address;
  std::uint16_t port;
} __attribute__((packed));

// The root: collects every rank's endpoint, then tells each rank all of them.
void serve_root(int listen_fd, std::uint64_t token) {
  std::vector<int> fds;
  std::vector<Endpoint> table;
  int nranks = -1;
  for (;;) {
    pollfd p{listen_fd, POLLIN, 0};
    if (poll(&p, 1, 10 * 60 * 1000) <= 0) break;  // nobody came: give up
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    Registration r{};
    if (fd < 0 || !recv_all(fd, &r, sizeof r) || r.token != token || r.rank < 0 || r.nranks <= 0 ||
        r.nranks > 4096 || (nranks >= 0 && r.nranks != nranks) || r.rank >= r.nranks) {
      if (fd >= 0) close(fd);
      continue;
    }
    if (nranks < 0) {
      nranks = r.nranks;
      table.resize(size_t(nranks));
      fds.assign(size_t(nranks), -1);
    }
    table[size_t(r.rank)] = {r.address, r.port};
    fds[size_t(r.rank)] = fd;
    if (std::count(fds.begin(), fds.end(), -1) == 0) break;
  }
  for (int fd : fds)
    if (fd >= 0) {
      send_all(fd, table.data(), table.size() * sizeof(Endpoint));
      close(fd);
    }
  close(listen_fd);
}

// --- communicators ------------------------------------------------------------------------

struct CommState {
  int rank = 0, nranks = 0;
  std::vector<int> peers;  // socket per rank; -1 for self
  std::atomic<ncclResult_t> async_error{ncclSuccess};
  std::atomic<bool> aborted{false};
  std::mutex peers_mutex;  // peers, as a non-blocking join installs them and an abort shuts them
  std::mutex io;  // one collective at a time on the sockets
  ~CommState() {
    for (int fd : peers)
      if (fd >= 0) close(fd);
  }
  void shut_down() {  // with peers_mutex held
    for (int fd : peers)
      if (fd >= 0) shutdown(fd, SHUT_RDWR);
  }
};

// Sends out[p] to and receives in[p] from every peer p at once, without deadlocking on full
// socket buffers. False when a peer is gone or the communicator was aborted.
struct Span {
  const char* out = nullptr;
  size_t out_left = 0;
  char* in = nullptr;
  size_t in_left = 0;
};

bool exchange(CommState& c, std::vector<Span>& spans) {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<int> who;
    for (int p = 0; p < c.nranks; ++p) {
      Span& s = spans[size_t(p)];
      short events = short((s.out_left ? POLLOUT : 0) | (s.in_left ? POLLIN : 0));
      if (p == c.rank || !events) continue;
      fds.push_back({c.peers[size_t(p)], events, 0});
      who.push_back(p);
    }
    if (fds.empty()) return true;
    if (c.aborted) return false;
    if (poll(fds.data(), fds.size(), 50) < 0 && errno != EINTR) return false;
    for (size_t k = 0; k < fds.size(); ++k) {
      Span& s = spans[size_t(who[k])];
      if (fds[k].revents & (POLLERR | POLLNVAL)) return false;
      if ((fds[k].revents & POLLOUT) && s.out_left) {
        ssize_t n = send(fds[k].fd, s.out, s.out_left, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN) return false;
        if (n > 0) s.out += n, s.out_left -= size_t(n);
      }
      if ((fds[k].revents & (POLLIN | POLLHUP)) && s.in_left) {
        ssize_t n = recv(fds[k].fd, s.in, s.in_left, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN)) return false;
        if (n > 0) s.in += n, s.in_left -= size_t(n);
      }
    }
  }
}

enum class Op { AllReduce, AllGather, ReduceScatter, Broadcast };

struct Task {
  std::shared_ptr<CommState> comm;
  Op op;
  const float* send;
  float* recv;
  size_t count;
  int root;
  bool fails;  // an async error: the work never completes until the communicator is aborted
};

bool run_collective(CommState& c, const Task& t) {
  const int n = c.nranks, me = c.rank;
  const size_t bytes = t.count * sizeof(float);
  std::vector<Span> spans(static_cast<size_t>(n));
  std::vector<std::vector<float>> incoming(static_cast<size_t>(n));
  switch (t.op) {
    case Op::AllReduce:
    case Op::ReduceScatter:
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        const float* out = t.op == Op::AllReduce ? t.send : t.send + size_t(p) * t.count;
        incoming[size_t(p)].resize(t.count);
        spans[size_t(p)] = {reinterpret_cast<const char*>(out), bytes,
                            reinterpret_cast<char*>(incoming[size_t(p)].data()), bytes};
      }
      if (!exchange(c, spans)) return false;
      for (size_t i = 0; i < t.count; ++i) {
        float sum = 0;
        for (int p = 0; p < n; ++p)
          sum += p == me ? t.send[(t.op == Op::AllReduce ? 0 : size_t(me) * t.count) + i]
                         : incoming[size_t(p)][i];
        t.recv[i] = sum;
      }
      return true;
    case Op::AllGather:
      for (int p = 0; p < n; ++p)
        if (p != me)
          spans[size_t(p)] = {reinterpret_cast<const char*>(t.send), bytes,
                              reinterpret_cast<char*>(t.recv + size_t(p) * t.count), bytes};
      std::memmove(t.recv + size_t(me) * t.count, t.send, bytes);
      return exchange(c, spans);
    case Op::Broadcast: {
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        if (me == t.root) spans[size_t(p)] = {reinterpret_cast<const char*>(t.send), bytes, nullptr, 0};
        else if (p == t.root) spans[size_t(p)] = {nullptr, 0, reinterpret_cast<char*>(t.recv), bytes};
      }
      if (me == t.root) std::memmove(t.recv, t.send, bytes);
      return exchange(c, spans);
    }
  }
  return false;
}

void run_task(void* arg) {
  std::unique_ptr<Task> t(static_cast<Task*>(arg));
  CommState& c = *t->comm;
  std::lock_guard lock(c.io);
  if (t->fails || c.async_error != ncclSuccess) {
    while (!c.aborted) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return;
  }
  if (!c.aborted && !run_collective(c, *t) && !c.aborted) c.async_error = ncclRemoteError;
}

// Registers with the bootstrap root, which answers with every rank's address, and connects
// the full mesh: a socket per peer in `peers` (-1 for this rank). False on any failure.
bool join_mesh(const IdContents& id, int rank, int nranks, std::vector<int>& peers) {
  peers.assign(size_t(nranks), -1);
  // This rank's listener, registered with the root, which answers with everyone's.
  std::uint16_t my_port = 0;
  const std::uint32_t my_address = pick_address();
  int listener = listen_on(my_address, my_port);
  Registration me{id.token, rank, nranks, my_address, my_port};
  int root = listener < 0 ? -1 : connect_to(id.address, id.port);
  std::vector<Endpoint> table(static_cast<size_t>(nranks));
  if (root < 0 || !send_all(root, &me, sizeof me) ||
      !recv_all(root, table.data(), table.size() * sizeof(Endpoint))) {
    if (root >= 0) close(root);
    if (listener >= 0) close(listener);
    return false;
  }
  close(root);
  // The mesh: each rank connects to the lower ranks and is connected to by the higher ones.
  bool ok = true;
  for (int p = 0; p < rank && ok; ++p) {
    int fd = connect_to(table[size_t(p)].address, table[size_t(p)].port);
    std::uint64_t hello[2] = {id.token, std::uint64_t(rank)};
    ok = fd >= 0 && send_all(fd, hello, sizeof hello);
    peers[size_t(p)] = fd;
  }
  for (int k = rank + 1; k < nranks && ok; ++k) {
    int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    std::uint64_t hello[2] = {0, 0};
    ok = fd >= 0 && recv_all(fd, hello, sizeof hello) && hello[0] == id.token &&
         hello[1] > std::uint64_t(rank) && hello[1] < std::uint64_t(nranks) &&
         peers[size_t(hello[1])] < 0;
    if (ok) {
      int yes = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
      peers[size_t(hello[1])] = fd;
    } else if (fd >= 0) {
      close(fd);
    }
  }
  close(listener);
  if (!ok)
    for (int& fd : peers)
      if (fd >= 0) close(std::exchange(fd, -1));
  return ok;
}

}  // namespace

struct ncclComm {
  std::shared_ptr<CommState> state;
};

namespace {

ncclResult_t enqueue(ncclComm_t comm, cudaStream_t stream, Op op, const void* send, void* recv,
                     size_t count, ncclDataType_t type, ncclRedOp_t red, int root) {
  if (!comm || !stream) return ncclInvalidArgument;
  if (type != ncclFloat32 || red != ncclSum) return ncclInvalidArgument;  // all muster uses
  if (op == Op::Broadcast && (root < 0 || root >= comm->state->nranks)) return ncclInvalidArgument;
  const int nth = ++g_collectives;
  if (int at = nth_for_me("MUSTER_FAKE_NCCL_HANG"); at > 0 && nth >= at) {
    log_event("hang");
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // a host thread that never returns
  }
  bool fails = false;
  if (int at = nth_for_me("MUSTER_FAKE_NCCL_ASYNC_ERROR"); at > 0 && nth >= at) {
    log_event("async-error");
    comm->state->async_error = ncclSystemError;  // a local fault; its peers see a remote one
    fails = true;
  }
  // Said once per process: a collective queued while the stream still had one to run, which
  // only a caller that does not wait after each collective (as nccl-tests times) produces.
  static std::atomic<bool> said_queued_behind{false};
  if (cudaStreamQuery(stream) == cudaErrorNotReady && !said_queued_behind.exchange(true))
    log_event("queued-behind");
  auto* task = new Task{comm->state, op, static_cast<const float*>(send), static_cast<float*>(recv),
                        count, root, fails};
  if (muster_fake_cuda_enqueue(stream, run_task, task) != 0) {
    delete task;
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (!unique_id) return ncclInvalidArgument;
  IdContents id{};
  std::memcpy(id.magic, "MFNC", 4);
  id.address = pick_address();
  int fd = listen_on(id.address, id.port);
  if (fd < 0) return ncclSystemError;
  id.token = std::random_device()() * 0x100000001ull + std::random_device()();
  std::thread(serve_root, fd, id.token).detach();
  std::memset(unique_id, 0, sizeof *unique_id);
  std::memcpy(unique_id->internal, &id, sizeof id);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  // As NCCL reads a config: its first `size` bytes, made by NCCL_CONFIG_INITIALIZER of 2.14
  // or later; blocking unless it says 0.
  bool blocking = true;
  if (config) {
    ncclConfig_t given = NCCL_CONFIG_INITIALIZER;
    size_t size = 0;
    std::memcpy(&size, config, sizeof size);
    std::memcpy(&given, config, std::min(size, sizeof given));
    if (given.magic != 0xcafebeef || given.version < NCCL_VERSION(2, 14, 0)) return ncclInvalidArgument;
    blocking = given.blocking != 0;
  }
  const char* fail = std::getenv("MUSTER_FAKE_NCCL_INIT_FAIL");
  if (fail && std::atoi(fail) == my_rank()) {
    log_event("init-failed");
    return ncclSystemError;
  }
  IdContents id;
  std::memcpy(&id, comm_id.internal, sizeof id);
  if (std::memcmp(id.magic, "MFNC", 4) != 0) return ncclInvalidArgument;

  auto state = std::make_shared<CommState>();
  state->rank = rank;
  state->nranks = nranks;
  // Which GPU the communicator is on, as the runtime names it: the caller's current device.
  int device = 0;
  char bus_id[32] = "?";
  cudaGetDevice(&device);
  cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device);
  const char* hang = std::getenv("MUSTER_FAKE_NCCL_INIT_HANG");
  const bool hangs = hang && std::atoi(hang) == my_rank();
  auto join = [state, id, bus = std::string(bus_id), hangs]() -> ncclResult_t {
    if (hangs) {  // as a rank whose bootstrap never completes: only an abort ends it
      log_event("init-hang");
      while (!state->aborted) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return ncclSystemError;
    }
    std::vector<int> peers;
    if (!join_mesh(id, state->rank, state->nranks, peers)) return ncclSystemError;
    std::lock_guard lock(state->peers_mutex);
    state->peers = std::move(peers);
    if (state->aborted) state->shut_down();
    log_event(("init on " + bus).c_str());
    return ncclSuccess;
  };
  if (blocking) {
    if (ncclResult_t rc = join(); rc != ncclSuccess) return rc;
    *comm = new ncclComm{state};
    return ncclSuccess;
  }
  // Non-blocking: the communicator exists at once and joins in the background.
  state->async_error = ncclInProgress;
  *comm = new ncclComm{state};
  std::thread([state, join] {
    const ncclResult_t rc = join();
    if (!state->aborted) state->async_error = rc;
  }).detach();
  return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, comm_id, rank, nullptr);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  log_event("abort");
  comm->state->aborted = true;
  {
    std::lock_guard lock(comm->state->peers_mutex);
    comm->state->shut_down();
  }  // unblocks the stream's work; it ends and lets go of the state
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  log_event("destroy");
  delete comm;  // work still queued keeps the state alive until it has run
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm || !async_error) return ncclInvalidArgument;
  *async_error = comm->state->async_error;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, stream, Op::AllReduce, sendbuff, recvbuff, count, datatype, op, 0);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, stream, Op::AllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return enqueue(comm, stream, Op::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, stream, Op::Broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root);
}

}  // extern "C"
