// gRPC server reflection v1 (grpc.reflection.v1.ServerReflection), beside
// the v1alpha that gRPC's plugin serves: the services a server lists, and
// the proto files (from the generated descriptor pool) that define them.
//
//   sortd::ReflectionV1 reflection({"sortd.v1.SortService", ...});
//   builder.RegisterService(&reflection);
#ifndef SORTD_SERVER_REFLECTION_V1_H_
#define SORTD_SERVER_REFLECTION_V1_H_

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace sortd {

class ReflectionV1 final
    : public grpc::reflection::v1::ServerReflection::Service {
 public:
  // `services`: the fully qualified names list_services answers with.
  explicit ReflectionV1(std::vector<std::string> services)
      : services_(std::move(services)) {}

  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                               grpc::reflection::v1::ServerReflectionRequest>*
          stream) override;

  // The answer to one request (exposed for tests).
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request) const;

 private:
  std::vector<std::string> services_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_REFLECTION_V1_H_
