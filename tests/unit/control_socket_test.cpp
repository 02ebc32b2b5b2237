// The job's control socket for `muster stacks`: in a directory of this user's alone, found by
// listing, and answering a stacks request; a directory others could write in is refused.
#include "launcher/job/control_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "launcher/error.h"

namespace muster {
namespace {

class ControlSocket : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/muster-control-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    runtime_ = pattern;
    const char* old = std::getenv("XDG_RUNTIME_DIR");
    if (old) saved_ = old;
    setenv("XDG_RUNTIME_DIR", runtime_.c_str(), 1);
  }
  void TearDown() override {
    if (saved_.empty()) unsetenv("XDG_RUNTIME_DIR");
    else setenv("XDG_RUNTIME_DIR", saved_.c_str(), 1);
    std::filesystem::remove_all(runtime_);
  }
  std::string runtime_, saved_;
};

TEST_F(ControlSocket, AJobIsListedAndAnswersAStacksRequest) {
  JobControlSocket socket("00000000000000ab", {"", "python3 hang.py", 8, "node[1-4]"});
  struct stat st {};
  ASSERT_EQ(stat((runtime_ + "/muster").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  std::thread head([&] {
    for (int i = 0; i < 2000; ++i) {
      if (auto client = socket.take_stacks_request()) return JobControlSocket::answer(*client, "the report");
      usleep(5000);
    }
  });
  EXPECT_EQ(ask_job_for_stacks("00000000000000ab", std::chrono::seconds(10)), "the report");
  head.join();
  std::atomic<bool> listed{false};
  std::thread lister([&] {
    for (int i = 0; i < 2000 && !listed; ++i) {
      EXPECT_FALSE(socket.take_stacks_request());  // "info" is answered, not handed on
      usleep(1000);
    }
  });
  const auto jobs = running_jobs();
  listed = true;
  lister.join();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].id, "00000000000000ab");
  EXPECT_EQ(jobs[0].command, "python3 hang.py");
  EXPECT_EQ(jobs[0].ranks, 8);
}

TEST_F(ControlSocket, ADirectoryOthersMayEnterIsRefusedAndNothingListens) {
  ASSERT_EQ(mkdir((runtime_ + "/muster").c_str(), 0755), 0);
  EXPECT_THROW(JobControlSocket("00000000000000ab", {}), Error);
  EXPECT_FALSE(std::filesystem::exists(runtime_ + "/muster/00000000000000ab.sock"));
}

TEST_F(ControlSocket, AJobIdThatIsNotOneIsRefusedBeforeAnyPathIsMade) {
  try {
    ask_job_for_stacks("../../etc/x", std::chrono::seconds(1));
    ADD_FAILURE() << "a path for a job id";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(runtime_ + "/muster"));
}

// A client that sends its request a part at a time (or not at all yet) is kept while the
// head goes on, and its request is taken once it is all there.
TEST_F(ControlSocket, ARequestThatComesInPartsIsTakenWhenWhole) {
  JobControlSocket socket("00000000000000cd", {"", "sleep 100", 1, "node1"});
  const int client = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(client, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string path = runtime_ + "/muster/00000000000000cd.sock";
  std::memcpy(address.sun_path, path.c_str(), path.size());
  ASSERT_EQ(connect(client, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(write(client, "sta", 3), 3);
  EXPECT_FALSE(socket.take_stacks_request());
  ASSERT_EQ(write(client, "cks\n", 4), 4);
  std::optional<int> taken;
  for (int i = 0; i < 2000 && !taken; ++i) {
    taken = socket.take_stacks_request();
    if (!taken) usleep(1000);
  }
  ASSERT_TRUE(taken);
  JobControlSocket::answer(*taken, "the report");
  char got[32] = {};
  EXPECT_EQ(read(client, got, sizeof got), 10);
  EXPECT_STREQ(got, "the report");
  close(client);
}

}  // namespace
}  // namespace muster
