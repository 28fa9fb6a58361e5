#include "agvisor/agent/trust.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "agvisor/base/fs.h"

namespace agvisor::agent {
namespace {

constexpr char kCa[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

TEST(TrustTest, TheBundleIsTheImagesStoreThenTheCa) {
  EXPECT_EQ(CombinedTrustBundle("A\nB", kCa), std::string("A\nB\n") + kCa);
  EXPECT_EQ(CombinedTrustBundle("A\n", kCa), std::string("A\n") + kCa);
  EXPECT_EQ(CombinedTrustBundle("", "X"), "X\n");
}

TEST(TrustTest, InstallsTheCaAndTheBundleUnderItsDirectoryOnly) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("agvisor-trust-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string store = (dir / "store.crt").string();
  std::ofstream(store) << "IMAGE ROOTS";
  const std::array<std::string_view, 4> stores = {"/nonexistent/a", store, "/nonexistent/b",
                                                  "/nonexistent/c"};
  const std::string ca = (dir / "ca.pem").string(), bundle = (dir / "bundle.pem").string();
  ASSERT_TRUE(InstallSandboxCa(kCa, ca, bundle, dir.string(), stores).ok());
  EXPECT_EQ(*ReadSmallFile(ca, 1 << 20), kCa);
  EXPECT_EQ(*ReadSmallFile(bundle, 1 << 20), std::string("IMAGE ROOTS\n") + kCa);
  struct stat st {};
  ASSERT_EQ(::stat(bundle.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  // Paths outside the directory (an image's env could say anything) and non-certificates.
  EXPECT_FALSE(InstallSandboxCa(kCa, "/etc/passwd", bundle, dir.string(), stores).ok());
  EXPECT_FALSE(
      InstallSandboxCa(kCa, ca, (dir / ".." / "x.pem").string(), dir.string(), stores).ok());
  EXPECT_FALSE(InstallSandboxCa("not a cert", ca, bundle, dir.string(), stores).ok());
  // No store in the image: the bundle is the CA alone.
  const std::array<std::string_view, 4> none = {"/nonexistent/a", "/nonexistent/b",
                                                "/nonexistent/c", "/nonexistent/d"};
  ASSERT_TRUE(InstallSandboxCa(kCa, ca, bundle, dir.string(), none).ok());
  EXPECT_EQ(*ReadSmallFile(bundle, 1 << 20), kCa);
  fs::remove_all(dir);
}

TEST(TrustTest, FromEnvDropsTheVariable) {
  ::unsetenv(std::string(kSandboxCaEnvVar).c_str());
  EXPECT_FALSE(*InstallSandboxCaFromEnv());
  ::setenv(std::string(kSandboxCaEnvVar).c_str(), kCa, 1);
  ::setenv("NODE_EXTRA_CA_CERTS", "/tmp/x.pem", 1);  // not under /.agvisor: refused
  ::setenv("SSL_CERT_FILE", "/tmp/y.pem", 1);
  EXPECT_FALSE(InstallSandboxCaFromEnv().ok());
  EXPECT_EQ(std::getenv(std::string(kSandboxCaEnvVar).c_str()), nullptr);
  ::unsetenv("NODE_EXTRA_CA_CERTS");
  ::unsetenv("SSL_CERT_FILE");
}

}  // namespace
}  // namespace agvisor::agent
