// The PMI-1 wire protocol as MPICH's simple PMI client speaks it, one node's ranks at a time:
// the conversation of MPI_Init, the barrier that waits for every rank, and the requests that
// break the protocol, each named with its rank.
#include "launcher/local/pmi1.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "launcher/error.h"
#include "launcher/local/pmi1_service.h"
#include "launcher/local/pmix_service.h"

namespace muster {
namespace {

Pmi1Node two_ranks() { return Pmi1Node({"kvs_7", 4, pmi1_process_mapping({0, 0, 1, 1})}, {2, 3}); }

// RFC 13's examples: blocks of nodes with the same count, and ranks dealt round the nodes.
TEST(Pmi1, TheMappingNamesBlocksOfNodesWithTheSameCount) {
  EXPECT_EQ(pmi1_process_mapping({0, 0, 1, 1}), "(vector,(0,2,2))");
  EXPECT_EQ(pmi1_process_mapping({0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}), "(vector,(0,2,2),(2,2,4))");
  EXPECT_EQ(pmi1_process_mapping({0, 1, 0, 1}), "(vector,(0,2,1),(0,2,1))");
  EXPECT_EQ(pmi1_process_mapping({0}), "(vector,(0,1,1))");
  std::vector<int> dealt;  // 4096 nodes x 2 dealt round the nodes: still two blocks
  for (int i = 0; i < 8192; ++i) dealt.push_back(i % 4096);
  EXPECT_EQ(pmi1_process_mapping(dealt), "(vector,(0,4096,1),(0,4096,1))");
  std::vector<int> ragged;  // runs of 1, 2, 3 ranks turn about: no two blocks join
  for (int k = 0; k < 500; ++k) ragged.insert(ragged.end(), size_t(k % 3 + 1), k % 2);
  EXPECT_EQ(pmi1_process_mapping(ragged), "");  // longer than a value: unknown
}

TEST(Pmi1, MpiInitsConversationIsAnsweredAsHydraAnswersIt) {
  Pmi1Node node = two_ranks();
  EXPECT_EQ(node.feed(2, "cmd=init pmi_version=1 pmi_subversion=1\n"),
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
  EXPECT_EQ(node.feed(2, "cmd=get_maxes\n"), "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024 rc=0\n");
  EXPECT_EQ(node.feed(2, "cmd=get_appnum\ncmd=get_my_kvsname\n"),
            "cmd=appnum appnum=0 rc=0\ncmd=my_kvsname kvsname=kvs_7 rc=0\n");
  EXPECT_EQ(node.feed(2, "cmd=get_universe_size\n"), "cmd=universe_size size=4 rc=0\n");
  EXPECT_EQ(node.feed(2, "cmd=get kvsname=kvs_7 key=PMI_process_mapping\n"),
            "cmd=get_result rc=0 value=(vector,(0,2,2))\n");
  // A request may come in pieces.
  EXPECT_EQ(node.feed(2, "cmd=put kvsname=kvs_7 key=bc-2 "), "");
  EXPECT_EQ(node.feed(2, "value=tcp://10.0.0.1:4000 x\n"), "cmd=put_result rc=0\n");
  EXPECT_EQ(node.feed(2, "cmd=finalize\n"), "cmd=finalize_ack rc=0\n");
}

// Nothing put is visible before the barrier, and no rank leaves the barrier until every
// local rank is in it and the exchange came back with every node's puts.
TEST(Pmi1, TheBarrierWaitsForEveryRankAndTheExchange) {
  Pmi1Node node = two_ranks();
  for (int rank : {2, 3}) node.feed(rank, "cmd=init pmi_version=1 pmi_subversion=1\n");
  node.feed(2, "cmd=put kvsname=kvs_7 key=bc-2 value=two\n");
  EXPECT_EQ(node.feed(3, "cmd=get kvsname=kvs_7 key=bc-2\n"), "cmd=get_result rc=-1 msg=key_not_found\n");
  EXPECT_EQ(node.feed(2, "cmd=barrier_in\n"), "");
  EXPECT_FALSE(node.barrier_ready());
  EXPECT_EQ(node.ranks_not_in_barrier(), std::vector<int>{3});
  node.feed(3, "cmd=put kvsname=kvs_7 key=bc-3 value=three\ncmd=barrier_in\n");
  ASSERT_TRUE(node.barrier_ready());
  const auto puts = node.take_puts();
  EXPECT_EQ(puts, (std::map<std::string, std::string>{{"bc-2", "two"}, {"bc-3", "three"}}));
  auto all = puts;
  all["bc-0"] = "zero";  // another node's
  const auto replies = node.complete_barrier(all);
  EXPECT_EQ(replies, (std::map<int, std::string>{{2, "cmd=barrier_out rc=0\n"}, {3, "cmd=barrier_out rc=0\n"}}));
  EXPECT_EQ(node.barriers(), 1);
  EXPECT_FALSE(node.barrier_ready());
  EXPECT_EQ(node.feed(3, "cmd=get kvsname=kvs_7 key=bc-0\n"), "cmd=get_result rc=0 value=zero\n");
  EXPECT_EQ(node.feed(2, "cmd=get kvsname=kvs_7 key=bc-3\n"), "cmd=get_result rc=0 value=three\n");
}

TEST(Pmi1, AbortKeepsTheRanksCodeAndMessage) {
  Pmi1Node node = two_ranks();
  node.feed(3, "cmd=init pmi_version=1 pmi_subversion=1\n");
  EXPECT_EQ(node.feed(3, "cmd=abort exitcode=7 message=application called MPI_Abort(comm, 7)\n"), "");
  ASSERT_TRUE(node.abort_request());
  EXPECT_EQ(node.abort_request()->rank, 3);
  EXPECT_EQ(node.abort_request()->exit_code, 7);
  EXPECT_EQ(node.abort_request()->message, "application called MPI_Abort(comm, 7)");
}

TEST(Pmi1, RequestsThatBreakTheProtocolAreRefusedNamingTheRank) {
  auto said = [](const std::string& bytes) -> std::string {
    Pmi1Node node = two_ranks();
    try {
      if (bytes.rfind("cmd=init", 0) != 0) node.feed(2, "cmd=init pmi_version=1 pmi_subversion=1\n");
      node.feed(2, bytes);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(said("cmd=barrier_in\n" + std::string(4000, 'x')), "rank 2 sent a PMI request longer than 2048 bytes");
  EXPECT_EQ(said("mcmd=spawn\n"), "rank 2 asked PMI to spawn processes (MPI_Comm_spawn), which muster does not serve");
  EXPECT_EQ(said("cmd=pmi2_cmd\n"), "rank 2 sent PMI cmd=pmi2_cmd, which is not part of PMI-1");
  EXPECT_EQ(said("key=value\n"), "rank 2 sent a PMI line without cmd=");
  Pmi1Node node = two_ranks();
  try {
    node.feed(2, "cmd=get_maxes\n");
    ADD_FAILURE() << "accepted a request before init";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 2 sent PMI cmd=get_maxes before cmd=init");
  }
  // Refused, not fatal: the library sees rc=-1 and says why.
  node.feed(2, "cmd=init pmi_version=1 pmi_subversion=1\n");
  EXPECT_EQ(node.feed(2, "cmd=put kvsname=other key=a value=b\n"), "cmd=put_result rc=-1 msg=no_such_kvsname\n");
  EXPECT_EQ(node.feed(2, "cmd=put kvsname=kvs_7 key=a value=" + std::string(1100, 'v') + "\n"),
            "cmd=put_result rc=-1 msg=value_too_long\n");
  EXPECT_EQ(node.feed(2, "cmd=lookup_name service=x\n"), "cmd=lookup_result rc=-1 msg=name_publishing_is_not_served\n");
  EXPECT_EQ(node.feed(2, "cmd=init pmi_version=2 pmi_subversion=0\n"),
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1\n");
}

// The service over real sockets, the ranks' ends held here as a rank holds descriptor 3: each
// rank is answered on its own socket, the barrier answers both once both are in, and a rank
// that breaks the protocol loses its connection with a note naming it.
// The key-value space counts every node's puts, not only this node's: a barrier whose puts
// from elsewhere fill it exactly completes, one byte more fails it with words (the ranks are
// then told, not left to wait), and a put past a full space is refused.
TEST(Pmi1Space, OtherNodesPutsCountAndTheLimitHoldsToTheByte) {
  auto fill = [](size_t bytes) {  // puts that pack to exactly `bytes`
    std::map<std::string, std::string> puts;
    for (int k = 0; bytes > 0; ++k) {
      const std::string key = fmt::format("k{:08}", k);
      auto size = [&](size_t v) { return packed_pmi1_put_size(key, std::string(v, 'v')); };
      // The last put takes what is left exactly; before it, each leaves enough for whole puts after it.
      size_t value = 1000;
      while (value > 0 && size(value) != bytes && size(value) + 40 > bytes) --value;
      puts[key] = std::string(value, 'v');
      bytes -= size(value);
    }
    return puts;
  };
  auto init = [](Pmi1Node& node) {
    node.feed(2, "cmd=init pmi_version=1 pmi_subversion=1\n");
    node.feed(3, "cmd=init pmi_version=1 pmi_subversion=1\n");
  };
  const size_t mapping = packed_pmi1_put_size("PMI_process_mapping", pmi1_process_mapping({0, 0, 1, 1}));
  {
    Pmi1Node node = two_ranks();
    init(node);
    const auto remote = fill(Pmi1Node::kMaxSpaceBytes - mapping);
    EXPECT_EQ(unpack_pmi1_puts({pack_pmi1_puts(remote)}).size(), remote.size());
    EXPECT_EQ(node.complete_barrier(remote).size(), 2u);
    EXPECT_EQ(node.feed(2, "cmd=put kvsname=kvs_7 key=one value=more\n"),
              "cmd=put_result rc=-1 msg=the_key-value_space_is_full\n");
  }
  {
    Pmi1Node node = two_ranks();
    init(node);
    try {
      node.complete_barrier(fill(Pmi1Node::kMaxSpaceBytes - mapping + 1));
      ADD_FAILURE() << "other nodes' puts went past the key-value space uncounted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("more than the 64 MiB muster keeps"), std::string::npos) << e.what();
    }
  }
}

// A node's puts cross the head as its part of the barrier; every node's come back as one map.
TEST(Pmi1Puts, EveryNodesPartsBecomeOneMapAndMalformedOnesAreRefused) {
  const std::string a = pack_pmi1_puts({{"bc-0", "tcp://10.0.0.1:5 x=y"}, {"k", ""}});
  const std::string b = pack_pmi1_puts({{"bc-1", "tcp://10.0.0.2:5"}});
  EXPECT_EQ(unpack_pmi1_puts({a, "", b}),
            (std::map<std::string, std::string>{{"bc-0", "tcp://10.0.0.1:5 x=y"}, {"bc-1", "tcp://10.0.0.2:5"}, {"k", ""}}));
  for (const std::string bad : {"1 1\nk", "0 1\nv", "x 1\nkv", "1\nk", "999 1\nkv", "1 99999\nkv"})
    EXPECT_THROW(unpack_pmi1_puts({bad}), Error) << bad;
}

TEST(Pmi1Service, RanksAreAnsweredOnTheirOwnSocketsAndMeetAtTheBarrier) {
  OneNodeExchange exchange;
  Pmi1Service service({"kvs_1", 2, pmi1_process_mapping({0, 0})}, {0, 1}, exchange);
  ProcessSpec spec[2];
  int rank_end[2];
  for (int r : {0, 1}) {
    service.prepare(r, spec[r]);
    EXPECT_EQ(spec[r].inherited_fd_in_child, 3);
    EXPECT_EQ(spec[r].env.get("PMI_FD"), "3");
    EXPECT_EQ(spec[r].env.get("PMI_RANK"), std::to_string(r));
    EXPECT_EQ(spec[r].env.get("PMI_SIZE"), "2");
    rank_end[r] = dup(spec[r].inherited_fd);  // what the rank's process inherits
    service.spawned(r);                       // muster's copy of it goes
  }
  auto say = [&](int r, const std::string& text) {
    ASSERT_EQ(write(rank_end[r], text.data(), text.size()), ssize_t(text.size()));
  };
  auto heard = [&](int r) {
    char buffer[4096];
    const ssize_t n = recv(rank_end[r], buffer, sizeof buffer, MSG_DONTWAIT);
    return n > 0 ? std::string(buffer, size_t(n)) : std::string();
  };
  say(0, "cmd=init pmi_version=1 pmi_subversion=1\n");
  say(1, "cmd=init pmi_version=1 pmi_subversion=1\ncmd=put kvsname=kvs_1 key=card-1 value=one\n");
  EXPECT_TRUE(service.serve().empty());
  EXPECT_EQ(heard(0), "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
  EXPECT_EQ(heard(1), "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\ncmd=put_result rc=0\n");
  say(0, "cmd=barrier_in\n");
  service.serve();
  EXPECT_EQ(heard(0), "");
  EXPECT_EQ(service.waiting_on(), "PMI barrier 1 (MPI_Init's, or a PMI_Barrier): rank 1 never entered it");
  say(1, "cmd=barrier_in\n");
  service.serve();
  EXPECT_EQ(heard(0), "cmd=barrier_out rc=0\n");
  EXPECT_EQ(heard(1), "cmd=barrier_out rc=0\n");
  say(0, "cmd=get kvsname=kvs_1 key=card-1\n");
  service.serve();
  EXPECT_EQ(heard(0), "cmd=get_result rc=0 value=one\n");
  say(1, std::string(3000, 'x'));
  const auto events = service.serve();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].note, "rank 1 sent a PMI request longer than 2048 bytes; its PMI connection was closed");
  EXPECT_FALSE(events[0].abort_code);
  EXPECT_EQ(service.descriptors().size(), 1u);
  close(rank_end[0]);  // rank 0 ended: its connection goes, with nothing to say
  EXPECT_TRUE(service.serve().empty());
  EXPECT_TRUE(service.descriptors().empty());
  close(rank_end[1]);
}

// A PMIx server's directory is alive while its server holds the directory's lock: one whose
// lock no one holds (an agent killed outright) goes when the next server starts, and no
// other does, whatever pid its name carries (a live server in another PID namespace that
// shares /tmp is named for a pid this one cannot see).
TEST(PmixDirectories, ThoseWhoseLockNoOneHoldsGoAndNoOthers) {
  char parent_pattern[] = "/tmp/muster-pmixdir-test-XXXXXX";
  ASSERT_NE(mkdtemp(parent_pattern), nullptr);
  const std::string parent = parent_pattern;
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  waitpid(dead, nullptr, 0);
  const std::string gone = fmt::format("{}/muster-pmix-{}-aaaaaa", parent, getpid());
  const std::string elsewhere = fmt::format("{}/muster-pmix-{}-bbbbbb", parent, dead);
  const std::string starting = fmt::format("{}/muster-pmix-{}-cccccc", parent, dead);
  const std::string old = fmt::format("{}/muster-pmix-{}-dddddd", parent, dead);
  const std::string other = parent + "/muster-pmix-notapid";
  for (const auto& dir : {gone, elsewhere, starting, old, other})
    ASSERT_TRUE(std::filesystem::create_directory(dir)) << dir;
  // gone: its server ended, its lock file stays with no one holding it.
  const int released = hold_pmix_directory(gone);
  ASSERT_GE(released, 0);
  close(released);
  std::ofstream(gone + "/pmix.node1.tool") << "x";
  // elsewhere: a live server whose pid this process cannot see.
  const int held = hold_pmix_directory(elsewhere);
  ASSERT_GE(held, 0);
  EXPECT_EQ(hold_pmix_directory(elsewhere), -1) << "a second server took a held directory";
  // old: no lock file, and older than a server takes to start.
  const auto long_ago = std::filesystem::file_time_type::clock::now() - kPmixUnlockedGrace - std::chrono::minutes(1);
  std::filesystem::last_write_time(old, long_ago);
  remove_pmix_directories_of_dead_servers(parent);
  EXPECT_FALSE(std::filesystem::exists(gone));
  EXPECT_TRUE(std::filesystem::exists(elsewhere));
  EXPECT_TRUE(std::filesystem::exists(starting));
  EXPECT_FALSE(std::filesystem::exists(old));
  EXPECT_TRUE(std::filesystem::exists(other));
  close(held);
  remove_pmix_directories_of_dead_servers(parent);
  EXPECT_FALSE(std::filesystem::exists(elsewhere)) << "its server ended";
  std::filesystem::remove_all(parent);
}

// Servers starting at once on a /tmp they share (agents of one job on nodes that share it,
// or jobs side by side) each clean up as they start: none may take another's directory,
// whose lock file it saw before its server held the lock, for a dead server's.
TEST(PmixDirectories, AServerStartingBesideOthersCleaningUpKeepsItsDirectory) {
  char parent_pattern[] = "/tmp/muster-pmixdir-test-XXXXXX";
  ASSERT_NE(mkdtemp(parent_pattern), nullptr);
  const std::string parent = parent_pattern;
  std::atomic<bool> stop{false};
  std::vector<std::thread> cleaners;
  for (int c = 0; c < 3; ++c)
    cleaners.emplace_back([&] {
      while (!stop) remove_pmix_directories_of_dead_servers(parent);
    });
  int lost = 0, unheld = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string dir = fmt::format("{}/muster-pmix-{}-XXXXXX", parent, getpid());
    if (!mkdtemp(dir.data())) {
      ADD_FAILURE() << "mkdtemp: " << strerror(errno);
      break;
    }
    const int fd = hold_pmix_directory(dir);
    unheld += fd < 0;
    lost += !std::filesystem::exists(dir + "/" + kPmixLockName);
    if (fd >= 0) close(fd);
    std::error_code ignored;  // a cleaner may be removing it too
    std::filesystem::remove_all(dir, ignored);
  }
  stop = true;
  for (auto& cleaner : cleaners) cleaner.join();
  std::filesystem::remove_all(parent);
  EXPECT_EQ(unheld, 0) << "servers that could not hold their own directory's lock";
  EXPECT_EQ(lost, 0) << "live servers' directories removed as dead";
}

}  // namespace
}  // namespace muster
