// Waiting for SIGINT/SIGTERM in server processes, and restarting one in place.
//
// Contract: call BlockTerminationSignals() first thing in main (before any thread starts)
// so that every thread inherits the blocked mask; then WaitForTerminationSignal() returns
// the signal number when one arrives, on the calling thread: SIGINT, SIGTERM, or
// kRestartSignal after RequestRestart() (any thread). ReExec() then replaces the process
// with a fresh run of the same binary and arguments (a coordinator that lost the
// leadership starts again as a standby); it returns only when exec fails, never.
#ifndef CASCADE_UTIL_SIGNALS_H_
#define CASCADE_UTIL_SIGNALS_H_

#include <csignal>

namespace cascade {

constexpr int kRestartSignal = SIGUSR2;

void BlockTerminationSignals();
int WaitForTerminationSignal();
void RequestRestart();
// Exec's the running binary with `argv` (null-terminated); exits 3 if exec fails.
[[noreturn]] void ReExec(char** argv);

}  // namespace cascade

#endif  // CASCADE_UTIL_SIGNALS_H_
