// What the benchmarks measure of one command: wall time, the head's peak memory and CPU
// time (from wait4), and its exit status; and the median over several runs.
#pragma once

#include <fcntl.h>
#include <cstdlib>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace muster::bench {

struct Measurement {
  double seconds = 0;
  double cpu_seconds = 0;  // user + system of the command (and what it waited for)
  long peak_kib = 0;       // largest resident set
  int status = 0;
  // Busy CPU time of the whole machine while it ran (every node's sshd, agent and ranks on a
  // test cluster, which share this machine's cores), without niced processes.
  double machine_cpu_seconds = 0;
};

// Busy (user + system + interrupt) CPU seconds of the whole machine since boot; niced work
// is left out, so a background job at nice 19 does not count.
inline double machine_busy_seconds() {
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
  if (FILE* f = std::fopen("/proc/stat", "r")) {
    if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle,
                    &iowait, &irq, &softirq) != 7)
      user = system = irq = softirq = 0;
    std::fclose(f);
  }
  return double(user + system + irq + softirq) / double(sysconf(_SC_CLK_TCK));
}

// Runs `argv` once with its output discarded.
inline Measurement measure(const std::vector<std::string>& argv) {
  std::fflush(stdout);  // or the child would print our buffered table again
  const double busy_before = machine_busy_seconds();
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> c;
    for (const auto& a : argv) c.push_back(const_cast<char*>(a.c_str()));
    c.push_back(nullptr);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    // MUSTER_BENCH_STDERR=FILE keeps what the commands said, to tell why one failed.
    const char* keep = std::getenv("MUSTER_BENCH_STDERR");
    int err = keep ? open(keep, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
    dup2(err >= 0 ? err : devnull, STDERR_FILENO);
    execvp(c[0], c.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  Measurement m;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.cpu_seconds = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                  double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  m.peak_kib = usage.ru_maxrss;
  m.machine_cpu_seconds = machine_busy_seconds() - busy_before;
  m.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return m;
}

// The run with the median wall time, with the largest peak memory of all runs.
inline Measurement median(const std::vector<std::string>& argv, int runs) {
  std::vector<Measurement> all;
  for (int i = 0; i < runs; ++i) all.push_back(measure(argv));
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.seconds < b.seconds; });
  Measurement m = all[all.size() / 2];
  for (const auto& x : all) m.peak_kib = std::max(m.peak_kib, x.peak_kib);
  return m;
}

}  // namespace muster::bench
