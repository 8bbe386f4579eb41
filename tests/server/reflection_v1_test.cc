// Reflection v1 (server/reflection_v1.h), the protocol grpcurl and Postman
// ask: each kind of question answered from the process's descriptors, a
// clear error for what does not exist, and the stream that carries them.
#include "server/reflection_v1.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "tests/in_process_service.h"

namespace sortd {
namespace {

namespace refl = grpc::reflection::v1;
using ::testing::HasSubstr;

const ReflectionV1& Reflection() {
  static const ReflectionV1 reflection({"sortd.v1.SortService", "x.Other"});
  return reflection;
}

// The names of the files a file_descriptor_response carries.
std::vector<std::string> FileNames(const refl::ServerReflectionResponse& r) {
  std::vector<std::string> names;
  for (const std::string& bytes :
       r.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    EXPECT_TRUE(file.ParseFromString(bytes));
    names.push_back(file.name());
  }
  return names;
}

TEST(ReflectionV1, ListsTheServicesItWasGivenAndEchoesTheRequest) {
  refl::ServerReflectionRequest request;
  request.set_host("sortd.example:443");
  request.set_list_services("*");
  const refl::ServerReflectionResponse r = Reflection().Answer(request);
  std::vector<std::string> names;
  for (const auto& s : r.list_services_response().service()) {
    names.push_back(s.name());
  }
  EXPECT_THAT(names, ::testing::ElementsAre("sortd.v1.SortService", "x.Other"));
  EXPECT_EQ(r.valid_host(), "sortd.example:443");
  EXPECT_EQ(r.original_request().list_services(), "*");
}

TEST(ReflectionV1, ServesTheFileOfANameOrASymbol) {
  refl::ServerReflectionRequest request;
  request.set_file_by_filename("sortd/v1/sortd.proto");
  const refl::ServerReflectionResponse r = Reflection().Answer(request);
  EXPECT_THAT(FileNames(r), ::testing::ElementsAre("sortd/v1/sortd.proto"));
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(
      r.file_descriptor_response().file_descriptor_proto(0)));
  ASSERT_EQ(file.service_size(), 1);
  EXPECT_EQ(file.service(0).name(), "SortService");
  EXPECT_EQ(file.service(0).method_size(),
            google::protobuf::DescriptorPool::generated_pool()
                ->FindServiceByName("sortd.v1.SortService")
                ->method_count());
  for (const char* symbol :
       {"sortd.v1.SortService", "sortd.v1.SortService.SortStream",
        "sortd.v1.SortRequest", "sortd.v1.SortRequest.u32_keys"}) {
    request.set_file_containing_symbol(symbol);
    EXPECT_THAT(FileNames(Reflection().Answer(request)),
                ::testing::ElementsAre("sortd/v1/sortd.proto"))
        << symbol;
  }
  // Any file the process was built with, not only sortd's.
  request.set_file_containing_symbol("google.protobuf.FileDescriptorProto");
  EXPECT_THAT(FileNames(Reflection().Answer(request)),
              ::testing::ElementsAre("google/protobuf/descriptor.proto"));
}

TEST(ReflectionV1, WhatDoesNotExistIsNotFoundNamingIt) {
  refl::ServerReflectionRequest by_name, by_symbol, by_extension, numbers;
  by_name.set_file_by_filename("no/such.proto");
  by_symbol.set_file_containing_symbol("sortd.v1.NoSuchThing");
  by_extension.mutable_file_containing_extension()->set_containing_type(
      "sortd.v1.SortRequest");
  by_extension.mutable_file_containing_extension()->set_extension_number(99);
  numbers.set_all_extension_numbers_of_type("sortd.v1.Nothing");
  struct Case {
    const refl::ServerReflectionRequest* request;
    const char* names;
  };
  for (const Case& c : {Case{&by_name, "no/such.proto"},
                        Case{&by_symbol, "sortd.v1.NoSuchThing"},
                        Case{&by_extension, "99 of sortd.v1.SortRequest"},
                        Case{&numbers, "sortd.v1.Nothing"}}) {
    const refl::ServerReflectionResponse r = Reflection().Answer(*c.request);
    EXPECT_EQ(r.error_response().error_code(), grpc::StatusCode::NOT_FOUND)
        << c.names;
    EXPECT_THAT(r.error_response().error_message(), HasSubstr(c.names));
    EXPECT_EQ(r.file_descriptor_response().file_descriptor_proto_size(), 0);
  }
}

TEST(ReflectionV1, ExtensionNumbersOfATypeAndARequestWithNoQuestion) {
  refl::ServerReflectionRequest request;
  request.set_all_extension_numbers_of_type("sortd.v1.SortRequest");
  refl::ServerReflectionResponse r = Reflection().Answer(request);
  ASSERT_TRUE(r.has_all_extension_numbers_response());
  EXPECT_EQ(r.all_extension_numbers_response().base_type_name(),
            "sortd.v1.SortRequest");
  EXPECT_EQ(r.all_extension_numbers_response().extension_number_size(), 0);

  r = Reflection().Answer(refl::ServerReflectionRequest());
  EXPECT_EQ(r.error_response().error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// The services sortd registers, then several questions on one stream, each
// answered in turn, served by the gRPC server sortd builds.
TEST(ReflectionV1, AnswersEachQuestionOfAStreamInTurn) {
  testing::InProcessService sortd;
  ASSERT_TRUE(sortd.Start().ok());
  auto stub = refl::ServerReflection::NewStub(sortd.Channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  auto stream = stub->ServerReflectionInfo(&context);
  refl::ServerReflectionRequest request;
  refl::ServerReflectionResponse response;

  request.set_list_services("");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> names;
  for (const auto& s : response.list_services_response().service()) {
    names.push_back(s.name());
  }
  EXPECT_THAT(names, ::testing::UnorderedElementsAre(
                         "sortd.v1.SortService", "grpc.health.v1.Health",
                         "grpc.reflection.v1.ServerReflection",
                         "grpc.reflection.v1alpha.ServerReflection"));

  request.set_file_containing_symbol("sortd.v1.SortService.SortStream");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_THAT(FileNames(response),
              ::testing::ElementsAre("sortd/v1/sortd.proto"));

  request.set_file_containing_symbol("sortd.v1.NoSuchThing");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.error_response().error_code(),
            grpc::StatusCode::NOT_FOUND);

  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace sortd
