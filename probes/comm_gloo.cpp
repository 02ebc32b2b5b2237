#include "probes/comm_gloo.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "launcher/error.h"
#include "launcher/thread.h"

namespace muster {
namespace {

// Gloo's store interface over muster's rendezvous, with a per-group key prefix. Gloo waits
// for each peer's key and then gets it: the wait keeps what it fetched for that get, which
// halves the round trips through rank 0 while the mesh connects (Gloo never sets a key twice).
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(RendezvousClient& client, std::string prefix, std::chrono::milliseconds timeout)
      : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    client_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    auto waited = fetched_.find(key);
    std::string v;
    if (waited == fetched_.end()) {
      v = client_.get(prefix_ + key, timeout_);
    } else {
      v = std::move(waited->second);
      fetched_.erase(waited);
    }
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& limit) override {
    for (const auto& k : keys)
      if (!fetched_.count(k)) fetched_[k] = client_.get(prefix_ + k, limit);
  }

 private:
  RendezvousClient& client_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  std::map<std::string, std::string> fetched_;  // by wait, for the get that follows
};

// At most this many of a rank's pairs connect or close at once: one tick of Gloo's loop
// serves them all, and a world of thousands of ranks needs no thousand threads a rank.
constexpr int kPairsAtOnce = 16;

// Runs `work(peer)` for every other rank of the group, kPairsAtOnce at a time: this thread
// and the others it starts (this one alone where none can be started, or one peer is all)
// take the peers in turn. Rethrows the first failure once all have ended.
template <typename Work>
void for_every_peer_at_once(int rank, int size, Work&& work) {
  std::vector<std::exception_ptr> failed(static_cast<size_t>(size));
  std::atomic<int> next{0};
  auto take_peers = [&] {
    for (int peer; (peer = next++) < size;) {
      if (peer == rank) continue;
      try {
        work(peer);
      } catch (...) {
        failed[size_t(peer)] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  try {
    for (int t = 1; t < std::min(kPairsAtOnce, size - 1); ++t) threads.push_back(signal_free_thread(take_peers));
  } catch (const std::system_error&) {  // out of threads: the ones started and this one share the rest
  }
  take_peers();
  for (auto& t : threads) t.join();
  for (auto& f : failed)
    if (f) std::rethrow_exception(f);
}

// Gloo's own connectFullMesh connects a rank's pairs one after the other, and a TCP pair of
// this Gloo (Debian's 0.0~git20220518), on the side that dials, first waits for its device's
// event loop to finish a tick: an epoll_wait of up to 10 ms when nothing else happens. A rank
// dials every peer of a lower address, so the last rank of a world waited for about as many
// ticks as there are ranks: the mesh took 150 ms on 16 nodes. Here a rank's pairs connect
// at once, on threads of their own, and wait for the same tick. Closing a connected pair
// waits for a tick too, and a peer's close is the only event that cuts a tick short: closed
// one after the other, a 16-rank world's pairs took 20-165 ms from the ranks' last word to
// their end, in steps of a tick, as each rank waited on the ones still open. Closed at once,
// 20-40 ms. The addresses go through the store as Gloo's own rendezvous puts them: each
// rank's, for every peer in rank order, under its rank.
class MeshContext : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;
  ~MeshContext() override {
    if (!transportContext_) return;
    try {
      for_every_peer_at_once(rank, size, [&](int peer) { getPair(peer)->close(); });
    } catch (const std::exception&) {  // a pair that could not close now closes in Gloo's own teardown
    }
  }

  void connect_every_pair_at_once(gloo::rendezvous::Store& store, std::shared_ptr<gloo::transport::Device> device) {
    auto transport = device->createContext(rank, size);
    transport->setTimeout(getTimeout());
    std::vector<char> addresses;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      const auto bytes = transport->createPair(peer)->address().bytes();
      addresses.insert(addresses.end(), bytes.begin(), bytes.end());
    }
    store.set(std::to_string(rank), addresses);
    std::vector<std::vector<char>> address_of(static_cast<size_t>(size));
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      const std::string key = std::to_string(peer);
      store.wait({key}, getTimeout());
      std::vector<char> all = store.get(key);
      address_of[size_t(peer)] = extractAddress(all, peer);
    }
    for_every_peer_at_once(rank, size, [&](int peer) { transport->getPair(peer)->connect(address_of[size_t(peer)]); });
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

class GlooCollective : public Collective {
 public:
  GlooCollective(RendezvousClient& store, std::shared_ptr<gloo::transport::Device> device,
                 int rank, int size, const std::string& name, std::chrono::milliseconds timeout)
      : store_(store), device_(std::move(device)), timeout_(timeout), name_(name) {
    auto context = std::make_shared<MeshContext>(rank, size);
    context->setTimeout(timeout);
    GlooStore prefixed(store, "gloo/" + name + "/", timeout);
    try {
      context->connect_every_pair_at_once(prefixed, device_);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Runtime, fmt::format("Gloo could not connect {}'s ranks: {}", name, e.what()));
    }
    context_ = std::move(context);
  }

  std::string backend() const override { return "gloo"; }
  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  float* allocate(size_t elements) override { return new float[std::max<size_t>(elements, 1)](); }
  void release(float* buffer) override { delete[] buffer; }
  void upload(float* buffer, const std::vector<float>& host) override {
    std::memcpy(buffer, host.data(), host.size() * sizeof(float));
  }
  std::vector<float> download(const float* buffer, size_t elements) override {
    return {buffer, buffer + elements};
  }

  void run(CollectiveOp op, const float* send, float* recv, size_t count) override {
    try {
      run_unchecked(op, send, recv, count);
    } catch (const gloo::Exception& e) {
      std::string message = fmt::format("{} failed: {}", op_name(op), e.what());
      // Gloo tells a timeout from a broken connection only by its words ("Timed out waiting
      // 30000ms for recv operation to complete").
      const std::string_view said = e.what();
      if (said.find("Timed out waiting") != std::string_view::npos)
        throw CollectiveTimedOut(std::move(message));
      if (said.find("Connection closed by peer") != std::string_view::npos ||
          said.find("Connection reset by peer") != std::string_view::npos)
        throw CollectivePeerLost(std::move(message));
      throw Error(ErrorKind::Runtime, std::move(message));
    }
  }

  std::unique_ptr<Collective> subgroup(const std::string& name,
                                       const std::vector<int>& members) override {
    auto it = std::find(members.begin(), members.end(), rank());
    if (it == members.end()) return nullptr;
    return std::make_unique<GlooCollective>(store_, device_, int(it - members.begin()),
                                            int(members.size()), name_ + "/" + name, timeout_);
  }

 private:
  void run_unchecked(CollectiveOp op, const float* send, float* recv, size_t count) {
    float* input = const_cast<float*>(send);  // Gloo's options are not const-correct
    switch (op) {
      case CollectiveOp::Barrier: {
        gloo::BarrierOptions opts(context_);
        opts.setTimeout(timeout_);
        gloo::barrier(opts);
        break;
      }
      case CollectiveOp::AllReduce: {
        gloo::AllreduceOptions opts(context_);
        opts.setInput(input, count);
        opts.setOutput(recv, count);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
        break;
      }
      case CollectiveOp::AllGather: {
        gloo::AllgatherOptions opts(context_);
        opts.setInput(input, count);
        opts.setOutput(recv, count * size_t(size()));
        opts.setTimeout(timeout_);
        gloo::allgather(opts);
        break;
      }
      case CollectiveOp::Broadcast: {
        gloo::BroadcastOptions opts(context_);
        opts.setRoot(0);
        if (rank() == 0) opts.setInput(input, count);
        opts.setOutput(recv, count);
        opts.setTimeout(timeout_);
        gloo::broadcast(opts);
        break;
      }
      case CollectiveOp::ReduceScatter:
        ring_reduce_scatter(send, recv, count);
        break;
    }
  }

  // Gloo's own reduce-scatter (halving-doubling) leaves blocks in a bit-reversed order and
  // none at all on some ranks when the group is not a power of two (measured with Debian's
  // libgloo 0.0~git20220518), so muster runs the ring algorithm NCCL uses over Gloo's
  // point-to-point buffers: n-1 steps, each sending one block on and adding one block in.
  void ring_reduce_scatter(const float* send, float* recv, size_t count) {
    const size_t n = size_t(size()), r = size_t(rank());
    std::vector<float>& scratch = scratch_[count];
    scratch.assign(send, send + n * count);
    std::vector<float> incoming(count);
    auto whole = context_->createUnboundBuffer(scratch.data(), scratch.size() * sizeof(float));
    auto in = context_->createUnboundBuffer(incoming.data(), count * sizeof(float));
    const int next = int((r + 1) % n), prev = int((r + n - 1) % n);
    for (size_t step = 0; step + 1 < n; ++step) {
      const size_t out_block = (r + 2 * n - step - 1) % n, in_block = (r + 2 * n - step - 2) % n;
      const uint64_t slot = uint64_t(context_->nextSlot());
      whole->send(next, slot, out_block * count * sizeof(float), count * sizeof(float));
      in->recv(prev, slot, 0, count * sizeof(float));
      in->waitRecv(nullptr, timeout_);
      whole->waitSend(nullptr, timeout_);
      float* block = scratch.data() + in_block * count;
      for (size_t i = 0; i < count; ++i) block[i] += incoming[i];
    }
    std::memcpy(recv, scratch.data() + r * count, count * sizeof(float));
  }

  RendezvousClient& store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::chrono::milliseconds timeout_;
  std::string name_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::map<size_t, std::vector<float>> scratch_;  // reduce-scatter's working copy, by size
};

// Gloo is only ever given a numeric address. Its own lookup of a name (lookupAddrForHostname
// in Debian's Gloo) checks getaddrinfo's result against -1 alone, and then walks a pointer it
// never set when a name does not resolve: the rank dies of SIGSEGV, or says "rp != nullptr"
// (fixed upstream in Gloo 575bf30). Resolved here, the failure is an error naming the host.
std::string numeric_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  // As Gloo chose among a name's addresses: the first this machine can bind.
  char text[INET6_ADDRSTRLEN] = {};
  bool named = false;
  for (addrinfo* a = rc == 0 ? found : nullptr; a && !named; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    named = bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
            getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0;
    close(fd);
  }
  if (found) freeaddrinfo(found);
  if (!named)
    throw Error(ErrorKind::Runtime,
                fmt::format("Gloo needs an address for this rank, and '{}' does not resolve ({}): "
                            "set GLOO_SOCKET_IFNAME to the interface the nodes share, or name the "
                            "node by its address", host, rc != 0 ? gai_strerror(rc) : "no address"));
  return text;
}

}  // namespace

std::unique_ptr<Collective> make_gloo_collective(RendezvousClient& store, int rank, int size,
                                                 const GlooSettings& settings) {
  gloo::transport::tcp::attr attr;
  if (!settings.interface.empty()) attr.iface = settings.interface;
  else attr.hostname = numeric_address(settings.address);
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Runtime,
                fmt::format("Gloo cannot use {}: {}", settings.interface.empty()
                                                          ? "address " + settings.address
                                                          : "interface " + settings.interface,
                            e.what()));
  }
  return std::make_unique<GlooCollective>(store, device, rank, size, "world", settings.timeout);
}

}  // namespace muster
