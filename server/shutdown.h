// How sortd stops. SIGTERM and SIGINT are blocked in every thread from the
// start of main() and taken by one sigwait; then health turns NOT_SERVING
// and Drain answers or refuses every call before the process exits.
//
//   BlockStopSignals();               // first thing in main()
//   ...serve...
//   int signal = WaitForStopSignal();
//   health->Shutdown();
//   Drain(service, scheduler, server, port, drain_timeout);
#ifndef SORTD_SERVER_SHUTDOWN_H_
#define SORTD_SERVER_SHUTDOWN_H_

#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/scheduler.h"
#include "server/service.h"

namespace sortd {

// Blocks SIGTERM and SIGINT in the calling thread and every thread it
// starts after, so that none but WaitForStopSignal's caller receives them.
void BlockStopSignals();

// Blocks until SIGTERM or SIGINT; returns which.
int WaitForStopSignal();

// With health NOT_SERVING already: new calls are answered UNAVAILABLE at
// once, calls in flight run to the deadline (now + `timeout`), then what
// has not started is answered UNAVAILABLE, answers are left to reach the
// clients, and gRPC's server and the scheduler stop.
void Drain(SortServiceImpl& service, Scheduler& scheduler, grpc::Server& server,
           int port, absl::Duration timeout);

}  // namespace sortd

#endif  // SORTD_SERVER_SHUTDOWN_H_
