// The job's TCP servers against hostile clients: no secret, a wrong proof, garbage, a 4 GiB
// length prefix, a flood of idle connections; and their protocols on their own.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "launcher/error.h"
#include "probes/comm_gloo.h"
#include "probes/digest.h"
#include "probes/job_server.h"
#include "probes/rendezvous_store.h"
#include "probes/socket_io.h"
#include "probes/tcp_probe.h"

namespace muster {
namespace {

using std::chrono::milliseconds;

int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  timeval limit{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  return fd;
}

sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  return addr;
}

// An address that drops every SYN, as a blackholed MASTER_ADDR or a wedged node does: a
// listener whose accept queue (backlog 0) is full and never drained.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr = loopback(0);
    socklen_t size = sizeof addr;
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(fd_, 0);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &size);
    port_ = ntohs(addr.sin_port);
    for (int i = 0; i < 3; ++i) {  // connections that are never accepted fill the queue
      int filler = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      connect(filler, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      fillers_.push_back(filler);
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  ~SilentListener() {
    for (int f : fillers_) close(f);
    close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
  std::vector<int> fillers_;
};

// True when the server closed `fd` (reads end), after taking whatever it had sent first.
bool closed_by_server(int fd) {
  char buffer[256];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

std::string message(char op, const std::string& key, const std::string& value) {
  std::string m(1, op);
  std::uint32_t n = std::uint32_t(key.size());
  m.append(reinterpret_cast<const char*>(&n), 4);
  m += key;
  n = std::uint32_t(value.size());
  m.append(reinterpret_cast<const char*>(&n), 4);
  m += value;
  return m;
}

// A blocking connect() waits out the kernel's SYN retries (about 127 s) whatever the
// caller's limit; connect_before gives up at its deadline, and says a refusal as one.
TEST(ConnectBefore, AnAddressThatDropsEverySynIsGivenUpAtTheDeadline) {
  SilentListener silent;
  sockaddr_in addr = loopback(silent.port());
  TcpConnection c = connect_before(reinterpret_cast<sockaddr*>(&addr), sizeof addr,
                                   SocketClock::now() + milliseconds(300));
  EXPECT_EQ(c.fd, -1);
  EXPECT_EQ(c.error, ETIMEDOUT);
  int closed = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // bound, never listening
  sockaddr_in unused = loopback(0);
  socklen_t size = sizeof unused;
  bind(closed, reinterpret_cast<sockaddr*>(&unused), sizeof unused);
  getsockname(closed, reinterpret_cast<sockaddr*>(&unused), &size);
  TcpConnection refused = connect_before(reinterpret_cast<sockaddr*>(&unused), sizeof unused,
                                         SocketClock::now() + milliseconds(5000));
  close(closed);
  EXPECT_EQ(refused.fd, -1);
  EXPECT_EQ(refused.error, ECONNREFUSED);
}

TEST(RendezvousClient, ABlackholedAddressFailsWithinItsLimitNotTheKernels) {
  SilentListener silent;
  try {
    RendezvousClient client("127.0.0.1", silent.port(), "secret", milliseconds(500));
    ADD_FAILURE() << "reached a listener that answers nothing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(no answer)"), std::string::npos) << e.what();
  }
  ProbeResult probe = probe_peer("127.0.0.1", silent.port(), "secret", 1, milliseconds(300), std::nullopt);
  EXPECT_FALSE(probe.reachable);
  EXPECT_NE(probe.error.find("no answer within 300 ms"), std::string::npos) << probe.error;
}

// Both ends prove the secret: a client takes no server's word for it, and each end's proof
// is its own (a proof reflected back to the end that made it is refused).
TEST(Handshake, EachEndProvesTheSecretAndNeitherTakesTheOthersWord) {
  const std::string secret = new_job_secret();
  auto pair = [] {
    std::array<int, 2> fds{};
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds.data()), 0);
    return fds;
  };
  {  // Both hold it.
    auto fds = pair();
    auto server = std::async(std::launch::async, [&] {
      return check_secret(fds[1], secret, kRendezvousPurpose, milliseconds(2000));
    });
    EXPECT_EQ(prove_secret(fds[0], secret, kRendezvousPurpose, milliseconds(2000)), "");
    EXPECT_EQ(server.get(), "");
    close(fds[0]);
    close(fds[1]);
  }
  {  // A server without it: the client refuses what the server answers.
    auto fds = pair();
    auto server = std::async(std::launch::async, [&] {
      return check_secret(fds[1], new_job_secret(), kRendezvousPurpose, milliseconds(2000));
    });
    EXPECT_NE(prove_secret(fds[0], secret, kRendezvousPurpose, milliseconds(2000)), "");
    EXPECT_EQ(server.get(), "the client does not hold the job's secret");
    close(fds[0]);
    close(fds[1]);
  }
  {  // A server that answers with bytes of its own making: refused, and said so.
    auto fds = pair();
    auto rogue = std::async(std::launch::async, [&] {
      const std::string nonce = random_bytes(kNonceSize);
      write_exact(fds[1], nonce.data(), nonce.size());
      char answer[kNonceSize + 32];
      read_exact(fds[1], answer, sizeof answer);
      const std::string fake = random_bytes(32);
      write_exact(fds[1], fake.data(), fake.size());
      // Whatever the client sends next would be taken by a stranger: nothing may come.
      char more = 0;
      return read(fds[1], &more, 1);
    });
    EXPECT_EQ(prove_secret(fds[0], secret, kRendezvousPurpose, milliseconds(2000)),
              "the server does not hold the job's secret: refused, nothing sent to it");
    close(fds[0]);
    EXPECT_EQ(rogue.get(), 0);
    close(fds[1]);
  }
  {  // A server that reflects the client's own proof back as its own.
    auto fds = pair();
    auto mirror = std::async(std::launch::async, [&] {
      const std::string nonce = random_bytes(kNonceSize);
      write_exact(fds[1], nonce.data(), nonce.size());
      char answer[kNonceSize + 32];
      read_exact(fds[1], answer, sizeof answer);
      write_exact(fds[1], answer + kNonceSize, 32);
    });
    EXPECT_NE(prove_secret(fds[0], secret, kRendezvousPurpose, milliseconds(2000)), "");
    mirror.get();
    close(fds[0]);
    close(fds[1]);
  }
}

TEST(JobServer, AClientWithoutTheSecretIsRefusedAndChangesNothing) {
  const std::string secret = new_job_secret();
  RendezvousProtocol protocol;
  JobServer server("127.0.0.1", 0, secret, kRendezvousPurpose, protocol, {}, "test");
  // A correct-looking write without the handshake: it is taken for a (wrong) proof.
  int stranger = connect_to(server.port());
  const std::string write = message('S', "gloo/world/rank0", "10.6.6.6:1");
  ASSERT_EQ(::write(stranger, write.data(), write.size()), ssize_t(write.size()));
  EXPECT_TRUE(closed_by_server(stranger));
  close(stranger);
  // A proof made with another secret.
  int impostor = connect_to(server.port());
  EXPECT_EQ(prove_secret(impostor, new_job_secret(), kRendezvousPurpose, milliseconds(2000)),
            "the server refused this job's secret, or sent no proof of its own");
  close(impostor);
  // The right secret for another kind of server.
  int replay = connect_to(server.port());
  EXPECT_NE(prove_secret(replay, secret, kProbePurpose, milliseconds(2000)), "");
  close(replay);

  RendezvousClient rank(std::string("127.0.0.1"), server.port(), secret, milliseconds(2000));
  EXPECT_THROW(rank.get("gloo/world/rank0", milliseconds(100)), Error);  // nothing was written
  rank.set("gloo/world/rank0", "10.0.0.1:2");
  EXPECT_EQ(rank.get("gloo/world/rank0", milliseconds(100)), "10.0.0.1:2");
}

// Without GLOO_SOCKET_IFNAME a rank binds Gloo to its host's address; a name that does not
// resolve made Debian's Gloo walk a pointer it never set (SIGSEGV at 64 test hosts). The rank
// now fails with an error naming the name and the fix, in its own process, whatever Gloo does.
TEST(GlooSetup, AHostNameThatDoesNotResolveIsAnErrorNotACrash) {
  const std::string secret = new_job_secret();
  RendezvousServer server("127.0.0.1", 0, secret);
  RendezvousClient store("127.0.0.1", server.port(), secret, milliseconds(2000));
  GlooSettings settings;
  settings.address = "not a host";  // refused by the resolver itself: no DNS query
  settings.timeout = milliseconds(500);
  try {
    make_gloo_collective(store, 0, 1, settings);
    ADD_FAILURE() << "a rank joined Gloo on a name that does not resolve";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'not a host' does not resolve"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("GLOO_SOCKET_IFNAME"), std::string::npos) << e.what();
  }
}

// A key that never appears and a store that went away are different causes: a probe rank
// blames the rank it waited for only for the first.
TEST(JobServer, AMissingKeyTimesOutButAStoreThatEndedIsABrokenConnection) {
  const std::string secret = new_job_secret();
  auto server = std::make_unique<RendezvousServer>("127.0.0.1", 0, secret);
  RendezvousClient rank("127.0.0.1", server->port(), secret, milliseconds(2000));
  EXPECT_THROW(rank.get("node/3", milliseconds(100)), RendezvousTimedOut);
  server.reset();  // rank 0 ended
  try {
    rank.get("node/3", milliseconds(100));
    ADD_FAILURE() << "a get from a store that ended returned";
  } catch (const RendezvousTimedOut& e) {
    ADD_FAILURE() << "a store that ended was taken for a timeout: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("connection broke"), std::string::npos) << e.what();
  }
}

TEST(JobServer, AHugeLengthPrefixClosesItsConnectionAtOnce) {
  const std::string secret = new_job_secret();
  RendezvousServer server("127.0.0.1", 0, secret);
  // Even with the secret, a request announcing a 4 GiB key is refused as soon as its length
  // is read: nothing waits for the bytes, nothing is reserved for them.
  int greedy = connect_to(server.port());
  ASSERT_EQ(prove_secret(greedy, secret, kRendezvousPurpose, milliseconds(2000)), "");
  const char prefix[] = {'S', '\xff', '\xff', '\xff', '\xff'};
  ASSERT_EQ(write(greedy, prefix, sizeof prefix), ssize_t(sizeof prefix));
  EXPECT_TRUE(closed_by_server(greedy));
  close(greedy);
  // A value just over the limit, the same.
  int big = connect_to(server.port());
  ASSERT_EQ(prove_secret(big, secret, kRendezvousPurpose, milliseconds(2000)), "");
  std::string request = message('S', "k", "");
  std::uint32_t too_long = std::uint32_t(kMaxRendezvousValue + 1);
  std::memcpy(request.data() + request.size() - 4, &too_long, 4);
  ASSERT_EQ(write(big, request.data(), request.size()), ssize_t(request.size()));
  EXPECT_TRUE(closed_by_server(big));
  close(big);
  RendezvousClient rank("127.0.0.1", server.port(), secret, milliseconds(2000));
  rank.set("still", "here");
  EXPECT_EQ(rank.get("still", milliseconds(100)), "here");
}

TEST(JobServer, AStrangerThatNeverAnswersTheChallengeIsDroppedAtTheDeadline) {
  RendezvousProtocol protocol;
  JobServer::Limits limits;
  limits.handshake = milliseconds(200);
  JobServer server("127.0.0.1", 0, new_job_secret(), kRendezvousPurpose, protocol, limits, "test");
  int silent = connect_to(server.port());
  EXPECT_TRUE(closed_by_server(silent));  // within the 5 s receive limit: the server hung up
  close(silent);
}

TEST(JobServer, AFloodOfIdleConnectionsIsShedAndRanksStillGetIn) {
  const std::string secret = new_job_secret();
  RendezvousProtocol protocol;
  JobServer::Limits limits;
  limits.handshake = milliseconds(300);
  JobServer server("127.0.0.1", 0, secret, kRendezvousPurpose, protocol, limits, "test");
  std::vector<int> idle;
  for (int i = 0; i < 1000; ++i) idle.push_back(connect_to(server.port()));
  // Connected before the flood: unaffected. Connecting during it: gets in once the idle
  // ones have been shed, well within its own limit.
  RendezvousClient late("127.0.0.1", server.port(), secret, milliseconds(10000));
  late.set("k", "v");
  EXPECT_EQ(late.get("k", milliseconds(100)), "v");
  int shed = 0;
  for (int fd : idle) {
    shed += fd >= 0 && closed_by_server(fd);
    if (fd >= 0) close(fd);
  }
  EXPECT_EQ(shed, 1000);
}

TEST(RendezvousProtocol, RequestsMayArriveInPiecesAndGetsWaitForTheirKey) {
  RendezvousProtocol store;
  JobServer::Protocol::Replies replies;
  std::string get = message('G', "id", "");
  get.resize(get.size() - 4);  // 'G' has a 32-bit wait, not a string, after the key
  std::uint32_t wait_ms = 5000;
  get.append(reinterpret_cast<const char*>(&wait_ms), 4);
  std::string in = get.substr(0, 3);
  EXPECT_TRUE(store.serve(1, in, replies));  // not whole yet: nothing happens
  EXPECT_TRUE(replies.empty());
  in += get.substr(3);
  EXPECT_TRUE(store.serve(1, in, replies));
  EXPECT_TRUE(in.empty());
  EXPECT_TRUE(replies.empty());  // connection 1 waits for "id"
  std::string set = message('S', "id", "42");
  EXPECT_TRUE(store.serve(2, set, replies));
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0], (std::pair<long, std::string>{2, "O"}));
  EXPECT_EQ(replies[1].first, 1);
  EXPECT_EQ(replies[1].second, std::string("V\x02\0\0\0" "42", 7));
  replies.clear();
  std::string never = message('G', "never", "");
  never.resize(never.size() - 4);
  std::uint32_t short_wait = 0;
  never.append(reinterpret_cast<const char*>(&short_wait), 4);
  EXPECT_TRUE(store.serve(3, never, replies));
  store.tick(JobServer::Clock::now() + milliseconds(1), replies);
  EXPECT_EQ(replies, (JobServer::Protocol::Replies{{3, "T"}}));
  std::string garbage = "Xjunk";
  EXPECT_FALSE(store.serve(4, garbage, replies));
}

TEST(ProbeProtocol, EchoesEveryByteAndCountsABulkStream) {
  ProbeProtocol probe;
  JobServer::Protocol::Replies replies;
  std::string in = "eabc";
  EXPECT_TRUE(probe.serve(1, in, replies));
  EXPECT_EQ(replies, (JobServer::Protocol::Replies{{1, "abc"}}));
  replies.clear();
  in = "b" + std::string(100000, 'x');
  EXPECT_TRUE(probe.serve(2, in, replies));
  EXPECT_TRUE(replies.empty());
  probe.end_of_input(2, replies);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].second.size(), sizeof(double));
  in = "?";
  EXPECT_FALSE(probe.serve(3, in, replies));
}

}  // namespace
}  // namespace muster
