#include "server/peer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace sortd {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

struct NoProperty : grpc::AuthPropertyIterator {};

// An AuthContext with fixed properties, as gRPC's TLS layer fills it.
class FakeAuthContext final : public grpc::AuthContext {
 public:
  FakeAuthContext(bool authenticated, std::string identity_property,
                  std::multimap<std::string, std::string> properties)
      : authenticated_(authenticated),
        identity_property_(std::move(identity_property)),
        properties_(std::move(properties)) {}

  bool IsPeerAuthenticated() const override { return authenticated_; }
  std::vector<grpc::string_ref> GetPeerIdentity() const override {
    return FindPropertyValues(identity_property_);
  }
  std::string GetPeerIdentityPropertyName() const override {
    return identity_property_;
  }
  std::vector<grpc::string_ref> FindPropertyValues(
      const std::string& name) const override {
    std::vector<grpc::string_ref> values;
    auto [from, to] = properties_.equal_range(name);
    for (auto it = from; it != to; ++it) values.emplace_back(it->second);
    return values;
  }
  grpc::AuthPropertyIterator begin() const override { return NoProperty(); }
  grpc::AuthPropertyIterator end() const override { return NoProperty(); }
  void AddProperty(const std::string&, const grpc::string_ref&) override {}
  bool SetPeerIdentityPropertyName(const std::string&) override {
    return false;
  }

 private:
  bool authenticated_;
  std::string identity_property_;
  std::multimap<std::string, std::string> properties_;
};

TEST(HostOfTest, DropsThePortOfIpAddresses) {
  EXPECT_EQ(HostOf("ipv4:127.0.0.1:40312"), "ipv4:127.0.0.1");
  EXPECT_EQ(HostOf("ipv4:10.1.2.3:1"), "ipv4:10.1.2.3");
  EXPECT_EQ(HostOf("ipv6:[::1]:40312"), "ipv6:[::1]");
  EXPECT_EQ(HostOf("ipv6:[fe80::1:2]:8"), "ipv6:[fe80::1:2]");
  EXPECT_EQ(HostOf("ipv6:%5B::1%5D:40312"), "ipv6:%5B::1%5D");
}

TEST(HostOfTest, KeepsOtherAddressesWhole) {
  EXPECT_EQ(HostOf("unix:/run/sortd.sock"), "unix:/run/sortd.sock");
  EXPECT_EQ(HostOf("ipv4:"), "ipv4:");
  EXPECT_EQ(HostOf("ipv6:[::1]"), "ipv6:[::1]");
  EXPECT_EQ(HostOf(""), "");
}

TEST(PeerFromTest, ConnectionsOfOneHostAreOneClient) {
  const Peer a = PeerFrom(nullptr, "ipv4:127.0.0.1:40312");
  const Peer b = PeerFrom(nullptr, "ipv4:127.0.0.1:40313");
  EXPECT_EQ(a.client, b.client);
  EXPECT_NE(a.client, PeerFrom(nullptr, "ipv4:127.0.0.2:40312").client);
  EXPECT_FALSE(a.authenticated());
  EXPECT_THAT(a.identities, IsEmpty());
}

TEST(PeerFromTest, AnUnauthenticatedContextCountsByAddress) {
  // TLS without a client certificate, or plaintext.
  FakeAuthContext auth(false, "", {{"transport_security_type", "ssl"}});
  const Peer p = PeerFrom(&auth, "ipv4:10.0.0.9:5000");
  EXPECT_EQ(p.client, "ipv4:10.0.0.9");
  EXPECT_FALSE(p.authenticated());
}

TEST(PeerFromTest, ACertificateIsTheClientWhateverItsAddress) {
  FakeAuthContext auth(true, "x509_subject_alternative_name",
                       {{"x509_subject_alternative_name", "client-a.example"},
                        {"x509_subject_alternative_name", "spiffe://a"},
                        {"x509_common_name", "ignored"}});
  const Peer p1 = PeerFrom(&auth, "ipv4:10.0.0.9:5000");
  const Peer p2 = PeerFrom(&auth, "ipv4:10.0.0.10:6000");
  EXPECT_EQ(p1.client, "x509:client-a.example");
  EXPECT_EQ(p1.client, p2.client);
  EXPECT_TRUE(p1.authenticated());
  EXPECT_THAT(p1.identities, ElementsAre("client-a.example", "spiffe://a"));
}

TEST(PeerFromTest, ACommonNameServesWithoutAlternativeNames) {
  FakeAuthContext auth(true, "x509_common_name",
                       {{"x509_common_name", "sortd test client"}});
  const Peer p = PeerFrom(&auth, "ipv4:127.0.0.1:1");
  EXPECT_EQ(p.client, "x509:sortd test client");
  EXPECT_THAT(p.identities, ElementsAre("sortd test client"));
}

TEST(PeerFromTest, AnAddressCannotPoseAsACertificate) {
  FakeAuthContext auth(true, "x509_common_name",
                       {{"x509_common_name", "ipv4:127.0.0.1"}});
  EXPECT_NE(PeerFrom(&auth, "ipv4:1.2.3.4:5").client,
            PeerFrom(nullptr, "ipv4:127.0.0.1:5").client);
}

}  // namespace
}  // namespace sortd
