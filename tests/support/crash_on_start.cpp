// A program that dies by SIGSEGV as soon as it starts, whatever its arguments: what a
// damaged binary on a node does. The tests put it where a node's muster should be.
#include <csignal>

int main() {
  std::signal(SIGSEGV, SIG_DFL);
  std::raise(SIGSEGV);
  return 0;
}
