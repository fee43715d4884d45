#include "util/signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cascade {
namespace {

sigset_t TerminationSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, kRestartSignal);
  return set;
}

}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t set = TerminationSet();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

void RequestRestart() { kill(getpid(), kRestartSignal); }

void ReExec(char** argv) {
  // The new image starts with the signals unblocked, as a process started by hand does.
  sigset_t set = TerminationSet();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "cannot start again (exec /proc/self/exe): %s\n", std::strerror(errno));
  _exit(3);
}

}  // namespace cascade
