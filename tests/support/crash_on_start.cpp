// A program that is killed by SIGKILL as soon as it starts, whatever its arguments: what the
// kernel's OOM killer does to a muster on a node out of memory. SIGKILL, because no
// sanitizer's handler can turn it into anything else. The tests put it where a node's
// muster should be.
#include <signal.h>
#include <unistd.h>

int main() {
  kill(getpid(), SIGKILL);
  return 0;
}
