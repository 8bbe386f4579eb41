// The gRPC port's credentials (server/tls.h): plaintext without files,
// incomplete or unreadable files refused naming the flag, and the
// credentials served: TLS takes only TLS clients, mutual TLS only clients
// with a certificate from the CA.
#include "server/tls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "tests/test_certs.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;

TEST(Tls, IncompleteOrUnreadableFilesAreRefusedNamingTheFlag) {
  testing::TestCertificates certs;
  ASSERT_TRUE(certs.Make({})) << certs.error();
  const std::string cert = certs.Path("server.pem");
  const std::string key = certs.Path("server.key");
  const std::string ca = certs.Path("ca.pem");
  struct Case {
    TlsFiles files;
    const char* named;
  };
  for (const Case& c : {
           Case{{cert, "", ""}, "--tls_key"},
           Case{{"", key, ""}, "--tls_cert"},
           Case{{"", "", ca}, "--tls_cert"},
           Case{{cert + ".missing", key, ""}, "--tls_cert="},
           Case{{cert, key + ".missing", ""}, "--tls_key="},
           Case{{cert, key, "/nonexistent/ca.pem"}, "--tls_client_ca="},
       }) {
    auto creds = ServerCredentials(c.files);
    ASSERT_FALSE(creds.ok()) << c.named;
    EXPECT_EQ(creds.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(creds.status().message(), HasSubstr(c.named));
  }
}

// Whether `channel` gets through the handshake: READY, or not (it fails
// first, or does not connect within 20 s).
bool Connects(const std::shared_ptr<grpc::Channel>& channel) {
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::seconds(20);
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY &&
         state != GRPC_CHANNEL_TRANSIENT_FAILURE) {
    if (!channel->WaitForStateChange(state, deadline)) return false;
    state = channel->GetState(true);
  }
  return state == GRPC_CHANNEL_READY;
}

// A gRPC server on a free loopback port with `creds`, serving `service`
// (a generic one that answers nothing: the handshake is what is tested).
std::unique_ptr<grpc::Server> Serve(
    std::shared_ptr<grpc::ServerCredentials> creds,
    grpc::CallbackGenericService* service, std::string* address) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(service);
  builder.AddListeningPort("127.0.0.1:0", creds, &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  *address = "127.0.0.1:" + std::to_string(port);
  return server;
}

std::shared_ptr<grpc::Channel> OwnChannel(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, creds, args);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(Tls, NoFilesIsPlaintext) {
  auto creds = ServerCredentials(TlsFiles{});
  ASSERT_TRUE(creds.ok()) << creds.status();
  grpc::CallbackGenericService service;
  std::string address;
  std::unique_ptr<grpc::Server> server = Serve(*creds, &service, &address);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(
      Connects(OwnChannel(address, grpc::InsecureChannelCredentials())));
  server->Shutdown();
}

TEST(Tls, MutualTlsAdmitsOnlyClientsWithACertificateFromTheCa) {
  testing::TestCertificates certs;
  ASSERT_TRUE(certs.Make({"client a"})) << certs.error();
  auto creds = ServerCredentials(
      certs.Path("server.pem"), certs.Path("server.key"), certs.Path("ca.pem"));
  ASSERT_TRUE(creds.ok()) << creds.status();
  grpc::CallbackGenericService service;
  std::string address;
  std::unique_ptr<grpc::Server> server = Serve(*creds, &service, &address);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(Connects(certs.Channel(address, 0)));
  // TLS without a client certificate, and plaintext, are refused.
  grpc::SslCredentialsOptions anonymous;
  anonymous.pem_root_certs = ReadFile(certs.Path("ca.pem"));
  EXPECT_FALSE(Connects(OwnChannel(address, grpc::SslCredentials(anonymous))));
  EXPECT_FALSE(
      Connects(OwnChannel(address, grpc::InsecureChannelCredentials())));
  server->Shutdown();
}

TEST(Tls, TlsWithoutACaTakesAnyTlsClientButNoPlaintextOne) {
  testing::TestCertificates certs;
  ASSERT_TRUE(certs.Make({})) << certs.error();
  auto creds =
      ServerCredentials(certs.Path("server.pem"), certs.Path("server.key"), "");
  ASSERT_TRUE(creds.ok()) << creds.status();
  grpc::CallbackGenericService service;
  std::string address;
  std::unique_ptr<grpc::Server> server = Serve(*creds, &service, &address);
  ASSERT_NE(server, nullptr);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(certs.Path("ca.pem"));
  EXPECT_TRUE(Connects(OwnChannel(address, grpc::SslCredentials(ssl))));
  EXPECT_FALSE(
      Connects(OwnChannel(address, grpc::InsecureChannelCredentials())));
  server->Shutdown();
}

}  // namespace
}  // namespace sortd
