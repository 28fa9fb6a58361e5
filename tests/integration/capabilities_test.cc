// Capabilities inside a sandbox (docs/security.md, "Capabilities"), on real runsc (label
// `integration`): every container starts from CapDrop ALL and gets back kSandboxCapabilities
// only. The dropped ones are gone from the bounding set, and what root inside a sandbox does all
// day still works: install a .deb, chown in /workspace, install a Python wheel, switch users.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>

#include "agvisor/sandbox/sandbox.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;
using testing::TestSpec;

// Bit numbers of linux/capability.h for the names in kSandboxCapabilities.
const std::map<std::string_view, int> kCapBits = {
    {"CHOWN", 0}, {"DAC_OVERRIDE", 1}, {"FOWNER", 3}, {"FSETID", 4},
    {"KILL", 5},  {"SETGID", 6},       {"SETUID", 7}, {"NET_BIND_SERVICE", 10}};

std::uint64_t KeptMask() {
  std::uint64_t m = 0;
  for (auto name : kSandboxCapabilities) m |= std::uint64_t{1} << kCapBits.at(name);
  return m;
}

class CapabilitiesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto sb = CreateSandbox(TestSpec("caps"));
    ASSERT_TRUE(sb.ok()) << sb.error().ToString();
    sb_ = std::move(*sb).release();
  }
  static void TearDownTestSuite() {
    if (sb_) (void)sb_->Delete();
    delete sb_;
    testing::CleanupRun();
  }
  // Runs a shell script as `user` ("" = root); expects exit 0 and returns stdout.
  static std::string Sh(const std::string& script, const std::string& user = "") {
    auto r = sb_->ExecShell(script, {.timeout = 60, .user = user});
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << script << "\nstdout: " << r->out << "\nstderr: " << r->err;
    return r->out;
  }
  static std::uint64_t CapField(const std::string& status, const std::string& field) {
    auto at = status.find(field + ":\t");
    EXPECT_NE(at, std::string::npos) << status;
    if (at == std::string::npos) return ~std::uint64_t{0};
    return std::stoull(status.substr(at + field.size() + 2, 16), nullptr, 16);
  }
  static inline Sandbox* sb_ = nullptr;
};

TEST_F(CapabilitiesTest, OnlyTheKeptOnesAreInTheBoundingAndEffectiveSets) {
  const std::string status = Sh("grep ^Cap /proc/self/status");
  // Docker 20.10's default set (before: 0xa80405fb) adds FSETID, SETPCAP, SYS_CHROOT, MKNOD,
  // AUDIT_WRITE and SETFCAP (and NET_RAW on Dockers that still grant it); none may be there.
  EXPECT_EQ(CapField(status, "CapBnd"), KeptMask()) << status;
  EXPECT_EQ(CapField(status, "CapEff"), KeptMask()) << status;
  // A user= exec (the agent drops to the user) holds none.
  const std::string user = Sh("grep ^Cap /proc/self/status", "nobody");
  EXPECT_EQ(CapField(user, "CapEff"), 0u) << user;
  EXPECT_EQ(CapField(user, "CapBnd"), KeptMask()) << user;
}

TEST_F(CapabilitiesTest, DroppedOnesAreRefusedInside) {
  // SYS_CHROOT is gone: root inside gets EPERM.
  auto r = sb_->ExecShell("chroot / true", {.timeout = 30});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_THAT(r->err, HasSubstr("Operation not permitted"));
  // runsc 20240729 does not check MKNOD (the node is made), but a node reaches only gVisor's
  // emulated devices: /dev/mem's numbers and a disk's give ENXIO, never a host device.
  r = sb_->ExecShell(
      "mknod /tmp/mem c 1 1 && mknod /tmp/disk b 8 0 && "
      "{ head -c 1 /tmp/mem; head -c 1 /tmp/disk; }",
      {.timeout = 30});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_THAT(r->err, HasSubstr("No such device or address"));
  EXPECT_EQ(r->out, "");
}

TEST_F(CapabilitiesTest, DpkgInstallsALocalPackage) {
  // A tiny package built inside with dpkg-deb; its postinst chowns a file, as many do.
  const std::string out = Sh(R"SH(set -e
d=/tmp/pkg
mkdir -p $d/DEBIAN $d/usr/share/agvisor-cap-test
echo hello > $d/usr/share/agvisor-cap-test/hello
cat > $d/DEBIAN/control <<EOF
Package: agvisor-cap-test
Version: 1.0
Architecture: all
Maintainer: agvisor tests <tests@example.invalid>
Description: a package the capability test installs
EOF
printf '#!/bin/sh\nset -e\nchown nobody:nogroup /usr/share/agvisor-cap-test/hello\n' > $d/DEBIAN/postinst
chmod 755 $d/DEBIAN/postinst
dpkg-deb --root-owner-group --build $d /tmp/agvisor-cap-test.deb >/dev/null
dpkg -i /tmp/agvisor-cap-test.deb >/dev/null
dpkg-query -W -f='${Status}\n' agvisor-cap-test
stat -c %U /usr/share/agvisor-cap-test/hello
dpkg -r agvisor-cap-test >/dev/null
test ! -e /usr/share/agvisor-cap-test/hello && echo removed)SH");
  EXPECT_EQ(out, "install ok installed\nnobody\nremoved\n");
}

TEST_F(CapabilitiesTest, ChownInTheWorkspaceAndSuToAnotherUser) {
  // chown (CHOWN), chmod of another user's directory (FOWNER), root writing into it and reading
  // that user's private file (DAC_OVERRIDE), su (SETUID, SETGID).
  const std::string out = Sh(R"SH(set -e
cd /workspace
mkdir -p shared && touch shared/f
chown -R nobody:nogroup shared
chmod 755 shared && chmod g+s shared
stat -c '%U:%G %A' shared shared/f
su -s /bin/sh nobody -c 'id -un; umask 077; echo private > shared/by-nobody'
stat -c '%U %a' shared/by-nobody
cat shared/by-nobody
touch shared/by-root
chown root:root shared/by-nobody && stat -c %U shared/by-nobody)SH");
  EXPECT_EQ(out,
            "nobody:nogroup drwxr-sr-x\nnobody:nogroup -rw-r--r--\nnobody\nnobody 600\n"
            "private\nroot\n");
  EXPECT_THAT(Sh("su -s /bin/sh nobody -c id"), HasSubstr("uid=65534(nobody)"));
}

TEST_F(CapabilitiesTest, RootServesOnAPortBelow1024) {
  // NET_BIND_SERVICE: needed where runsc uses the host's network stack (--network=host, as on
  // this project's machines); gVisor's own stack allows it anyway.
  EXPECT_EQ(Sh("python3 -c 'import socket; s = socket.socket(); s.bind((\"0.0.0.0\", 80)); "
               "s.listen(); print(\"listening\")'"),
            "listening\n");
}

TEST_F(CapabilitiesTest, PythonWheelInstallsSystemWideAndIntoAVenv) {
  // The base image has python3 but neither pip nor ensurepip. A wheel is a zip that pip unpacks
  // into site-packages; here python3's zipfile does that unpacking, as root system-wide (what
  // `pip install --break-system-packages` writes) and as a user into a venv that root made and
  // handed over with chown.
  const std::string out = Sh(R"SH(set -e
cd /tmp && rm -rf whl && mkdir -p whl/agvisor_cap_test whl/agvisor_cap_test-1.0.dist-info
echo 'VALUE = 42' > whl/agvisor_cap_test/__init__.py
printf 'Metadata-Version: 2.1\nName: agvisor-cap-test\nVersion: 1.0\n' > whl/agvisor_cap_test-1.0.dist-info/METADATA
printf 'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n' > whl/agvisor_cap_test-1.0.dist-info/WHEEL
: > whl/agvisor_cap_test-1.0.dist-info/RECORD
(cd whl && python3 -m zipfile -c ../agvisor_cap_test-1.0-py3-none-any.whl agvisor_cap_test agvisor_cap_test-1.0.dist-info)
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
mkdir -p "$site"
python3 -m zipfile -e agvisor_cap_test-1.0-py3-none-any.whl "$site"
su -s /bin/sh nobody -c 'cd / && python3 -c "import agvisor_cap_test as m; print(m.VALUE)"'
python3 -m venv --without-pip /workspace/venv
chown -R nobody:nogroup /workspace/venv
su -s /bin/sh nobody -c 'v=$(/workspace/venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()[\"purelib\"])") && python3 -m zipfile -e /tmp/agvisor_cap_test-1.0-py3-none-any.whl "$v" && /workspace/venv/bin/python -c "import agvisor_cap_test, sys; print(agvisor_cap_test.__file__.startswith(sys.prefix))"'
rm -rf "$site/agvisor_cap_test" "$site/agvisor_cap_test-1.0.dist-info")SH");
  EXPECT_EQ(out, "42\nTrue\n");
}

TEST_F(CapabilitiesTest, RootSignalsAUsersProcess) {
  // KILL is kept: root inside (the agent, or a user's own `kill`) ends another user's process.
  EXPECT_EQ(Sh("su -s /bin/sh nobody -c 'sleep 300 & echo $!' > /tmp/pid; "
               "kill -9 $(cat /tmp/pid) && echo killed"),
            "killed\n");
}

}  // namespace
}  // namespace agvisor
