// Test support: throw-away certificates made with openssl for one test (a
// CA, a server certificate for localhost and 127.0.0.1, client
// certificates from the CA with given common names) and mutual-TLS
// channels that present them.
//
//   TestCertificates certs;
//   ASSERT_TRUE(certs.Make({"client a", "client b"})) << certs.error();
//   ServerProcess server({"--device=cpu", certs.ServerFlags()...});
//   auto channel = certs.Channel(server.address(), 0);  // as "client a"
#ifndef SORTD_TESTS_TEST_CERTS_H_
#define SORTD_TESTS_TEST_CERTS_H_

#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"

namespace sortd::testing {

class TestCertificates {
 public:
  ~TestCertificates() {
    if (!dir_.empty()) (void)!std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  // Client i's certificate has common name clients[i] (no alternative
  // names: its identity is that name). False when openssl failed.
  bool Make(const std::vector<std::string>& clients) {
    char tmpl[] = "/tmp/sortd_certs_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return false;
    dir_ = tmpl;
    const std::string key =
        "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::ostringstream script;
    script << "set -e\ncd '" << dir_ << "'\n"
           << "openssl req -x509 " << key
           << " -keyout ca.key -out ca.pem -days 1 -subj '/CN=sortd test CA'\n"
           << "openssl req " << key
           << " -keyout server.key -out server.csr -subj '/CN=localhost'\n"
           << "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.ext\n"
           << "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
              "-CAcreateserial -out server.pem -days 1 -extfile san.ext\n";
    for (size_t i = 0; i < clients.size(); ++i) {
      const std::string name = "client" + std::to_string(i);
      script << "openssl req " << key << " -keyout " << name << ".key -out "
             << name << ".csr -subj '/CN=" << clients[i] << "'\n"
             << "openssl x509 -req -in " << name
             << ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -out " << name
             << ".pem -days 1\n";
    }
    std::ofstream(Path("make.sh")) << script.str();
    const std::string command =
        "sh '" + Path("make.sh") + "' > '" + Path("make.log") + "' 2>&1";
    return std::system(command.c_str()) == 0;
  }
  // openssl's output, when Make failed.
  std::string error() const { return Read("make.log"); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  // sortd's flags for mutual TLS with these certificates.
  std::vector<std::string> ServerFlags() const {
    return {"--tls_cert=" + Path("server.pem"),
            "--tls_key=" + Path("server.key"),
            "--tls_client_ca=" + Path("ca.pem")};
  }
  // A channel of its own connection that presents client i's certificate.
  std::shared_ptr<grpc::Channel> Channel(const std::string& address,
                                         size_t client) const {
    const std::string name = "client" + std::to_string(client);
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = Read("ca.pem");
    ssl.pem_private_key = Read(name + ".key");
    ssl.pem_cert_chain = Read(name + ".pem");
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(address, grpc::SslCredentials(ssl), args);
  }

 private:
  std::string Read(const std::string& name) const {
    std::ifstream in(Path(name), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string dir_;
};

}  // namespace sortd::testing

#endif  // SORTD_TESTS_TEST_CERTS_H_
