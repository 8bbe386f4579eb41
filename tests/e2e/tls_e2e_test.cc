// End to end over TLS: server-only and mutual TLS, and the flags that must
// come together.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/e2e_util.h"
#include "tests/reference.h"
#include "tests/server_process.h"

namespace sortd {
namespace {

using ::testing::HasSubstr;
using testing::RunCommand;
using testing::ServerProcess;

// Throw-away certificates made with openssl for one test: a CA, a server
// certificate for localhost and 127.0.0.1, a client certificate from the
// same CA, and a client certificate from an unrelated CA.
class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sortd_tls_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string key =
        "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string script = absl::StrCat(
        "set -e; cd ", dir_, "; ", "openssl req -x509 ", key,
        " -keyout ca.key -out ca.pem -days 1 "
        "-subj '/CN=sortd test CA'; ",
        "openssl req ", key,
        " -keyout server.key -out server.csr "
        "-subj '/CN=localhost'; ",
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.ext; ",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out server.pem -days 1 -extfile san.ext; ",
        "openssl req ", key,
        " -keyout client.key -out client.csr "
        "-subj '/CN=sortd test client'; ",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out client.pem -days 1; ",
        "openssl req -x509 ", key,
        " -keyout other-ca.key -out other-ca.pem "
        "-days 1 -subj '/CN=other CA'; ",
        "openssl req ", key,
        " -keyout other.key -out other.csr "
        "-subj '/CN=intruder'; ",
        "openssl x509 -req -in other.csr -CA other-ca.pem -CAkey other-ca.key "
        "-CAcreateserial -out other.pem -days 1");
    auto r = RunCommand("sh -c \"" + script + "\"");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  void TearDown() override { RunCommand("rm -rf " + dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  absl::StatusOr<SortResult<uint32_t>> TrySort(const ServerProcess& server,
                                               ClientOptions options) {
    options.timeout = absl::Seconds(20);
    auto client = Client::Create(server.address(), options);
    if (!client.ok()) return client.status();
    return (*client)->Sort<uint32_t>(std::vector<uint32_t>{3, 1, 2});
  }

  std::string dir_;
};

TEST_F(TlsTest, ServesTlsClientsAndRefusesPlaintext) {
  ServerProcess server({"--device=cpu", "--tls_cert=" + Path("server.pem"),
                        "--tls_key=" + Path("server.key")});
  ASSERT_TRUE(server.Start()) << server.Output();
  EXPECT_TRUE(server.WaitForLine("speaks TLS", std::chrono::seconds(30)))
      << server.Output();
  ClientOptions tls;
  tls.tls_ca = Path("ca.pem");
  auto ok = TrySort(server, tls);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->keys, (std::vector<uint32_t>{1, 2, 3}));
  auto plain = TrySort(server, {});
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kUnavailable);
  // A server certificate from a CA the client does not trust.
  ClientOptions wrong_ca;
  wrong_ca.tls_ca = Path("other-ca.pem");
  EXPECT_FALSE(TrySort(server, wrong_ca).ok());
  auto r = RunCommand(Sortctl(
      server, "--tls_ca=" + Path("ca.pem") + " sort --random=5000 --verify"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("verified"));
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

TEST_F(TlsTest, MutualTlsAdmitsOnlyClientsWithACertificateFromItsCa) {
  ServerProcess server({"--device=cpu", "--tls_cert=" + Path("server.pem"),
                        "--tls_key=" + Path("server.key"),
                        "--tls_client_ca=" + Path("ca.pem")});
  ASSERT_TRUE(server.Start()) << server.Output();
  EXPECT_TRUE(server.WaitForLine("requires client certificates",
                                 std::chrono::seconds(30)))
      << server.Output();
  ClientOptions no_cert;
  no_cert.tls_ca = Path("ca.pem");
  EXPECT_FALSE(TrySort(server, no_cert).ok());
  ClientOptions intruder = no_cert;
  intruder.tls_cert = Path("other.pem");
  intruder.tls_key = Path("other.key");
  EXPECT_FALSE(TrySort(server, intruder).ok());
  ClientOptions member = no_cert;
  member.tls_cert = Path("client.pem");
  member.tls_key = Path("client.key");
  auto ok = TrySort(server, member);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->keys, (std::vector<uint32_t>{1, 2, 3}));
  auto r = RunCommand(Sortctl(server, "--tls_ca=" + Path("ca.pem") +
                                          " --tls_cert=" + Path("client.pem") +
                                          " --tls_key=" + Path("client.key") +
                                          " health"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(server.Terminate(), 0) << server.Output();
}

TEST_F(TlsTest, IncompleteTlsFlagsStopStartup) {
  ServerProcess cert_only({"--device=cpu", "--tls_cert=" + Path("server.pem")});
  EXPECT_FALSE(cert_only.Start());
  EXPECT_THAT(cert_only.Output(), HasSubstr("--tls_key"));
  ServerProcess missing({"--device=cpu", "--tls_cert=" + Path("nope.pem"),
                         "--tls_key=" + Path("server.key")});
  EXPECT_FALSE(missing.Start());
  EXPECT_THAT(missing.Output(), HasSubstr("cannot read"));
}

}  // namespace
}  // namespace sortd
