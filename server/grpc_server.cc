#include "server/grpc_server.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/log.h"
#include "server/reflection_v1.h"

namespace sortd {
namespace {

// host:port with the port replaced by the one bound.
std::string BoundAddress(const std::string& listen, int port) {
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    SortServiceImpl& service, const GrpcServerOptions& options, int* port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  auto credentials = ServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(options.listen, *credentials, port);
  builder.SetMaxReceiveMessageSize(options.max_receive_bytes);
  builder.SetMaxSendMessageSize(-1);
  ApplyGrpcLimits(options.limits, builder);
  LogLine("%s\n", DescribeGrpcLimits(options.limits).c_str());
  builder.RegisterService(&service);
  // Reflection v1 beside gRPC's v1alpha; it lives as long as the process.
  static ReflectionV1 reflection(
      {v1::SortService::service_full_name(), "grpc.health.v1.Health",
       grpc::reflection::v1::ServerReflection::service_full_name(),
       "grpc.reflection.v1alpha.ServerReflection"});
  builder.RegisterService(&reflection);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (--listen)"));
  }
  server->GetHealthCheckService()->SetServingStatus(false);
  return server;
}

void PrintServing(const std::string& listen, int port,
                  const std::string& metrics_listen,
                  const std::vector<int>& metrics_ports) {
  std::printf(
      "sortd: serving on %s%s\n", BoundAddress(listen, port).c_str(),
      metrics_ports.empty()
          ? " (metrics disabled)"
          : absl::StrCat(" (metrics on ",
                         BoundAddress(metrics_listen, metrics_ports.front()),
                         "/metrics)")
                .c_str());
  std::fflush(stdout);
}

}  // namespace sortd
