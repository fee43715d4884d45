// Waiting for SIGINT/SIGTERM in server processes.
//
// Contract: call BlockTerminationSignals() first thing in main (before any thread starts)
// so that every thread inherits the blocked mask; then WaitForTerminationSignal() returns
// the signal number when one arrives, on the calling thread.
#ifndef CASCADE_UTIL_SIGNALS_H_
#define CASCADE_UTIL_SIGNALS_H_

namespace cascade {

void BlockTerminationSignals();
int WaitForTerminationSignal();

}  // namespace cascade

#endif  // CASCADE_UTIL_SIGNALS_H_
