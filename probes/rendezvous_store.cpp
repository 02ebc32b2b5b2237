#include "probes/rendezvous_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "launcher/error.h"
#include "probes/socket_io.h"

namespace muster {
namespace {

// A request may wait for a key at most this long, whatever it asks for.
constexpr std::chrono::milliseconds kLongestWait = std::chrono::minutes(30);

void append_u32(std::string& out, std::uint32_t n) { out.append(reinterpret_cast<const char*>(&n), 4); }
void append_string(std::string& out, const std::string& s) {
  append_u32(out, std::uint32_t(s.size()));
  out += s;
}

// Reads from a request being parsed; sizes are checked against the protocol's bounds as
// soon as they are known, before anything waits for or allocates the bytes they announce.
class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  enum class Got { Yes, NeedMore, Bad };
  Got u32(std::uint32_t& n) {
    if (in_.size() - at_ < 4) return Got::NeedMore;
    std::memcpy(&n, in_.data() + at_, 4);
    at_ += 4;
    return Got::Yes;
  }
  Got string(std::string& s, size_t max) {
    std::uint32_t n = 0;
    if (Got g = u32(n); g != Got::Yes) return g;
    if (n > max) return Got::Bad;
    if (in_.size() - at_ < n) return Got::NeedMore;
    s.assign(in_, at_, n);
    at_ += n;
    return Got::Yes;
  }
  size_t used() const { return at_; }

 private:
  const std::string& in_;
  size_t at_ = 1;  // after the op byte
};

}  // namespace

bool RendezvousProtocol::serve(long id, std::string& in, Replies& replies) {
  while (!in.empty()) {
    const char op = in[0];
    if (op != 'S' && op != 'G') return false;
    Reader r(in);
    std::string key, value;
    std::uint32_t wait_ms = 0;
    Reader::Got got = r.string(key, kMaxRendezvousKey);
    if (got == Reader::Got::Yes) got = op == 'S' ? r.string(value, kMaxRendezvousValue) : r.u32(wait_ms);
    if (got == Reader::Got::Bad) return false;
    if (got == Reader::Got::NeedMore) return true;  // the rest of the request is on its way
    in.erase(0, r.used());

    if (op == 'S') {
      auto it = values_.find(key);
      const size_t replaced = it == values_.end() ? 0 : key.size() + it->second.size();
      if (stored_bytes_ - replaced + key.size() + value.size() > kMaxRendezvousBytes) return false;
      stored_bytes_ = stored_bytes_ - replaced + key.size() + value.size();
      replies.emplace_back(id, "O");
      for (auto w = waiting_.begin(); w != waiting_.end();) {
        if (w->key != key) {
          ++w;
          continue;
        }
        std::string answer = "V";
        append_string(answer, value);
        replies.emplace_back(w->id, std::move(answer));
        w = waiting_.erase(w);
      }
      values_[key] = std::move(value);
    } else if (auto it = values_.find(key); it != values_.end()) {
      std::string answer = "V";
      append_string(answer, it->second);
      replies.emplace_back(id, std::move(answer));
    } else {
      const auto wait = std::min(std::chrono::milliseconds(wait_ms), kLongestWait);
      waiting_.push_back({id, std::move(key), JobServer::Clock::now() + wait});
    }
  }
  return true;
}

void RendezvousProtocol::tick(JobServer::Clock::time_point now, Replies& replies) {
  for (auto w = waiting_.begin(); w != waiting_.end();) {
    if (w->until > now) {
      ++w;
      continue;
    }
    replies.emplace_back(w->id, "T");
    w = waiting_.erase(w);
  }
}

void RendezvousProtocol::closed(long id) {
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(),
                                [&](const Waiting& w) { return w.id == id; }),
                 waiting_.end());
}

RendezvousServer::RendezvousServer(const std::string& address, int port, const std::string& secret)
    : server_(address, port, secret, kRendezvousPurpose, protocol_,
              // Every rank keeps one connection for the whole test.
              JobServer::Limits{size_t(1) << 16, 64, std::chrono::seconds(3),
                                std::chrono::seconds(10), kMaxRendezvousValue + 64},
              "the rendezvous") {}

RendezvousClient::RendezvousClient(const std::string& host, int port, const std::string& secret,
                                   std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::string why = "no answer";
  std::chrono::milliseconds retry_after(5);
  while (std::chrono::steady_clock::now() < deadline) {
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      const TcpConnection connection = connect_before(found->ai_addr, found->ai_addrlen, deadline);
      freeaddrinfo(found);
      if (const int fd = connection.fd; fd >= 0) {
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // reads are bounded by set_deadline
        int yes = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
        why = prove_secret(fd, secret, kRendezvousPurpose, std::chrono::seconds(5));
        if (why.empty()) {
          fd_ = fd;
          return;
        }
        close(fd);
      } else {
        why = connection.error == ETIMEDOUT ? "no answer" : std::strerror(connection.error);
      }
    } else {
      why = "cannot resolve " + host;
    }
    // Ranks start together and rank 0 is often still loading: try again soon at first.
    std::this_thread::sleep_for(retry_after);
    retry_after = std::min(retry_after * 2, std::chrono::milliseconds(50));
  }
  throw Error(ErrorKind::Runtime, fmt::format("cannot reach the rendezvous at {}:{} ({}); is "
                                              "MASTER_ADDR reachable from this node?", host, port, why));
}

RendezvousClient::~RendezvousClient() {
  if (fd_ >= 0) close(fd_);
}

// Each message goes out in one write: split into several, Nagle and delayed ACKs would hold
// every request back for 40 ms.
namespace {
// Bounds the next reads and writes on `fd`: a rank 0 that vanished without a FIN (its node
// lost power) must not hold a rank forever.
void set_deadline(int fd, std::chrono::milliseconds limit) {
  timeval tv{long(limit.count() / 1000), long(limit.count() % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}
}  // namespace

void RendezvousClient::set(const std::string& key, const std::string& value) {
  set_deadline(fd_, std::chrono::seconds(30));
  std::string message = "S";
  append_string(message, key);
  append_string(message, value);
  char ok = 0;
  if (!write_exact(fd_, message.data(), message.size()) || !read_exact(fd_, &ok, 1) || ok != 'O')
    throw Error(ErrorKind::Runtime, "the rendezvous connection broke (rank 0 gone?)");
}

std::string RendezvousClient::get(const std::string& key, std::chrono::milliseconds limit) {
  set_deadline(fd_, limit + std::chrono::seconds(30));
  std::string message = "G";
  append_string(message, key);
  append_u32(message, std::uint32_t(std::min<long long>(limit.count(), UINT32_MAX)));
  char answer = 0;
  if (!write_exact(fd_, message.data(), message.size()) || !read_exact(fd_, &answer, 1))
    throw Error(ErrorKind::Runtime, "the rendezvous connection broke (rank 0 gone?)");
  if (answer == 'T')
    throw RendezvousTimedOut(fmt::format("timed out waiting for '{}' at the rendezvous", key));
  std::uint32_t n = 0;
  std::string value;
  if (answer != 'V' || !read_exact(fd_, &n, 4) || n > kMaxRendezvousValue)
    throw Error(ErrorKind::Runtime, "the rendezvous connection broke");
  value.resize(n);
  if (!read_exact(fd_, value.data(), n)) throw Error(ErrorKind::Runtime, "the rendezvous connection broke");
  return value;
}

}  // namespace muster
