// Where agvisord is reached (pure parsing): the ssh:// form and the agvisord of a Docker host.
#include "agvisor/client/agvisord_api.h"

#include <gtest/gtest.h>

#include "agvisor/client/agvisord.h"

namespace agvisor::client {
namespace {

TEST(ParseServerAddressTest, SshReachesAgvisordsSocketOnThatHost) {
  auto ep = ParseServerAddress("ssh://root@build1:2222");
  ASSERT_TRUE(ep.ok()) << ep.error().ToString();
  EXPECT_EQ(ep->kind, http::Endpoint::Kind::kSsh);
  EXPECT_EQ(ep->user, "root");
  EXPECT_EQ(ep->host, "build1");
  EXPECT_EQ(ep->port, 2222);
  EXPECT_EQ(ep->path, "/run/agvisord.sock");  // root's default there, not Docker's socket
  EXPECT_EQ(ServerAddressString(*ep), "ssh://root@build1:2222/run/agvisord.sock");

  auto with_path = ParseServerAddress("ssh://build1/tmp/a/agvisord.sock");
  ASSERT_TRUE(with_path.ok()) << with_path.error().ToString();
  EXPECT_EQ(with_path->path, "/tmp/a/agvisord.sock");
  EXPECT_EQ(ServerAddressString(*with_path), "ssh://build1/tmp/a/agvisord.sock");
}

TEST(ParseServerAddressTest, MalformedSshAddressesAreRefusedNamingTheForms) {
  for (const char* bad :
       {"ssh://-oProxyCommand=x", "ssh://", "ssh://h/relative:path", "ssh://h/with space"}) {
    auto ep = ParseServerAddress(bad);
    ASSERT_FALSE(ep.ok()) << bad;
    EXPECT_EQ(ep.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(ep.error().message().find("ssh://USER@HOST"), std::string::npos)
        << ep.error().message();
  }
}

TEST(EgressAgvisordAddressTest, AnSshDockerHostsAgvisordRunsOnThatHost) {
  auto a = EgressAgvisordAddress("ssh://root@build1:2222/var/run/docker.sock");
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(*a, "ssh://root@build1:2222");
  EXPECT_EQ(ParseServerAddress(*a)->path, "/run/agvisord.sock");
  auto tcp = EgressAgvisordAddress("tcp://127.0.0.1:2375");
  ASSERT_FALSE(tcp.ok());
  EXPECT_EQ(tcp.error().code(), ErrorCode::kUnsupported);
  auto local = EgressAgvisordAddress("unix:///var/run/docker.sock");
  if (local.ok()) {
    EXPECT_TRUE(local->starts_with("unix:/")) << *local;
  }
}

}  // namespace
}  // namespace agvisor::client
