// How sortd stops: the stop signals, and the drain that answers or
// refuses every call before the process exits.
#include "server/shutdown.h"

#include <pthread.h>
#include <signal.h>

#include "server/connections.h"
#include "server/log.h"

namespace sortd {

// Signals are taken by sigwait in Serve(); blocked before any thread (gRPC,
// oneTBB, the metrics server) starts so that none of those threads
// receives them instead.
void BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

// Blocks until SIGTERM or SIGINT (blocked in every thread since main()).
int WaitForStopSignal() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return signal_number;
}

// Health is NOT_SERVING already. New calls are answered UNAVAILABLE at
// once; calls in flight run (the scheduler no longer waits for batches to
// fill). Whatever has not started by the drain deadline gets UNAVAILABLE.
void Drain(SortServiceImpl& service, Scheduler& scheduler, grpc::Server& server,
           int port, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  scheduler.StartDrain();
  service.StartDrain();
  if (!service.WaitForCalls(deadline)) scheduler.AbandonQueued();
  // Only then gRPC's shutdown, whose GOAWAY makes it close each connection
  // once it has no call: first the clients' hosts acknowledge every byte
  // of their answers, which a closing socket would otherwise cut off.
  const int unacknowledged =
      WaitForAnswersAcknowledged(port, deadline + absl::Seconds(1));
  if (unacknowledged > 0) {
    LogAt(LogLevel::kWarning,
          "%d connection(s) still had answers in flight at the deadline\n",
          unacknowledged);
  }
  server.Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  server.Wait();
  service.StopHandlers();
  scheduler.Drain(absl::Now());
}

}  // namespace sortd
