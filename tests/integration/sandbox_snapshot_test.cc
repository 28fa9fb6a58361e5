// Snapshots and forks against the real dockerd + runsc (label `integration`; docs/lifecycle.md,
// "Snapshots and forks"): files written outside /workspace are in the image, byte for byte, and
// /proc, /sys, /dev, the agent's files and /workspace are not; `create --image` starts from it
// (the image with the agent is derived from the imported image); a sandbox whose agent was
// replaced sends crafted streams ('..' names, a size past the cap, a truncated stream, a
// symlink then a file through it) and each is refused with no image left; a fork of 2 copies
// /workspace (owners kept) into forks that are independent of each other and of the source;
// and the figures of the issue (snapshot of the base image plus 200 MB, fork of 4), printed.
// A snapshot never replaces an image agvisor did not make as one (issue 32 point 1): the default
// image, a host container's image, a tag someone put in the snapshot repository.
// The CLI (in process, with its progress on stderr) and agvisord (a fork through its API) too:
// the suite starts an agvisord, so run it under `flock /tmp/agvisor-egress.lock`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "agvisor/base/subprocess.h"
#include "agvisor/client/agvisord.h"
#include "agvisor/sandbox/sandbox.h"
#include "agvisor/sandbox/snapshot.h"
#include "tests/integration/test_env.h"

namespace agvisor {
namespace {

using ::testing::HasSubstr;
using testing::RunId;
using testing::TestSpec;

// A snapshot's tag for this run, and the image it is made as (snapshot.h).
std::string Tag(std::string_view what) { return "test-" + std::string(what) + "-" + RunId(); }
std::string Ref(std::string_view what) {
  return std::string(kDefaultSnapshotRepository) + ":" + Tag(what);
}

// The id of image `ref`, "" when there is none.
std::string ImageId(const std::string& ref) {
  auto docker = ConnectDockerHost("");
  if (!docker.ok()) return "";
  auto info = (*docker)->InspectImage(ref);
  return info.ok() ? info->id : "";
}

// Removes the images a snapshot of `name` made, and the images with the agent derived from them
// (they inherit the label), children first.
void RemoveSnapshotsOf(const std::string& name) {
  auto docker = ConnectDockerHost("");
  if (!docker.ok()) return;
  for (int round = 0; round < 3; ++round) {
    auto images = (*docker)->ListImages({"agvisor.snapshot.of=" + name});
    if (!images.ok() || images->empty()) return;
    for (const auto& i : *images) (void)(*docker)->RemoveImage(i.id, /*force=*/true);
  }
}

// The default image tagged by hand as `ref` (in the snapshot repository: an image there that is
// no snapshot) for as long as this lives; then the tag only goes (the image keeps its own).
class HandMadeTag {
 public:
  explicit HandMadeTag(std::string ref) : ref_(std::move(ref)) {
    auto r = RunCommand({"docker", "tag", std::string(kDefaultImage), ref_});
    if (!r.ok()) error_ = r.error().ToString();
    if (r.ok() && !r->status.success()) error_ = r->err.empty() ? "docker tag failed" : r->err;
  }
  ~HandMadeTag() { (void)RunCommand({"docker", "rmi", ref_}); }
  HandMadeTag(const HandMadeTag&) = delete;
  HandMadeTag& operator=(const HandMadeTag&) = delete;
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  std::string ref_;
  std::string error_;
};

// The tags of the images the runtime derived from image `id` (the images with the agent).
std::vector<std::string> DerivedImagesOf(Runtime& runtime, const std::string& id) {
  auto d = runtime.DerivedImagesOf(id);
  EXPECT_TRUE(d.ok()) << d.error().ToString();
  std::vector<std::string> tags;
  for (const ImageEntry& e : d.ok() ? *d : std::vector<ImageEntry>{}) {
    tags.insert(tags.end(), e.tags.begin(), e.tags.end());
  }
  return tags;
}

class SnapshotTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    testing::CleanupRun();
    for (const char* n : {"snap-src", "snap-hostile", "snap-tags", "fork-src", "measure-src",
                          "layer-a", "layer-b", "layer-c"}) {
      RemoveSnapshotsOf(RunId() + "-" + n);
    }
  }
  static std::unique_ptr<Sandbox> MustCreate(const SandboxSpec& spec) {
    auto sb = CreateSandbox(spec);
    EXPECT_TRUE(sb.ok()) << sb.error().ToString();
    return sb.ok() ? std::move(*sb) : nullptr;
  }
  static std::string Sh(Sandbox& sb, const std::string& script) {
    ExecOptions o;
    o.timeout = 300;
    auto r = sb.ExecShell(script, o);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << script << ": " << r->err;
    return r->out;
  }
  // The entries of `image`'s file system as Docker stores it (a never-started container's
  // export), one per line.
  static std::string ImageListing(const std::string& image) {
    const std::string c = "agvisor-test-export-" + RunId();
    auto r = RunCommand({"sh", "-c",
                         "docker create --label test.run=" + RunId() + " --name " + c + " " +
                             image + " /true >/dev/null && docker export " + c +
                             " | tar -tf -; docker rm -f " + c + " >/dev/null"});
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->out : "";
  }
  static bool ImageExists(const std::string& image) {
    auto docker = ConnectDockerHost("");
    return docker.ok() && (*docker)->InspectImage(image).ok();
  }
};

TEST_F(SnapshotTest, KeepsRootFsChangesLeavesOutProcSysDevAgentAndWorkspace) {
  auto src = MustCreate(TestSpec("snap-src"));
  ASSERT_TRUE(src);
  const std::string hash =
      Sh(*src,
         "mkdir -p /opt/x && head -c 3000000 /dev/urandom > /opt/x/data.bin && "
         "chmod 4750 /opt/x/data.bin && ln -s /opt/x/data.bin /opt/abs-link && "
         "echo ws > /workspace/w.txt && sha256sum /opt/x/data.bin");
  ASSERT_FALSE(hash.empty());
  const std::string image = Ref("snap");
  std::uint64_t last_progress = 0;
  SnapshotOptions o;
  o.image = Tag("snap");
  o.progress = [&](std::uint64_t b) { last_progress = b; };
  auto r = src->Snapshot(o);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->image, image);
  EXPECT_GE(r->file_bytes, 3000000u);
  EXPECT_EQ(last_progress, r->bytes);  // the last call reports the whole stream
  std::cout << "[snapshot] base image + 3 MB: " << r->bytes / 1000000.0 << " MB, " << r->entries
            << " entries in " << r->seconds << " s\n";

  // The image as Docker stores it: the change is there; /proc, /sys, /dev are empty
  // directories; the agent, its socket directory and /workspace's contents are not.
  const std::string listing = ImageListing(image);
  EXPECT_THAT(listing, HasSubstr("opt/x/data.bin\n"));
  EXPECT_THAT(listing, HasSubstr("proc/\n"));
  EXPECT_THAT(listing, ::testing::Not(HasSubstr("proc/1")));
  EXPECT_THAT(listing, ::testing::Not(HasSubstr("proc/self")));
  EXPECT_THAT(listing, ::testing::Not(HasSubstr("sys/kernel")));
  EXPECT_THAT(listing, ::testing::Not(HasSubstr("dev/null")));
  EXPECT_THAT(listing, ::testing::Not(HasSubstr(".agvisor/agvisor-agent")));
  EXPECT_THAT(listing, ::testing::Not(HasSubstr("workspace/w.txt")));
  // Labels, and the source image's configuration kept.
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  auto info = (*docker)->InspectImage(image);
  ASSERT_TRUE(info.ok()) << info.error().ToString();
  EXPECT_EQ(info->labels["agvisor.snapshot.of"], RunId() + "-snap-src");
  EXPECT_EQ(info->labels["agvisor.snapshot.workspace"], "false");
  EXPECT_FALSE(info->labels.contains("agvisor.agent"));
  // The source image's Env (agvisor/base, itself an import, has none) comes over as it was.
  auto base = (*docker)->InspectImage(std::string(kDefaultImage));
  ASSERT_TRUE(base.ok());
  EXPECT_EQ(info->env, base->env);

  // A sandbox from it, named the short way: the hashed file, its mode and the symlink are there.
  SandboxSpec s = TestSpec();
  s.image = "snapshot:" + Tag("snap");
  auto copy = MustCreate(s);
  ASSERT_TRUE(copy);
  EXPECT_EQ(Sh(*copy, "sha256sum /opt/x/data.bin"), hash);
  EXPECT_EQ(Sh(*copy, "stat -c %a /opt/x/data.bin; readlink /opt/abs-link"),
            "4750\n/opt/x/data.bin\n");
  EXPECT_EQ(Sh(*copy, "ls /workspace"), "");
}

// Layered snapshots (issue 37): a snapshot is the sandbox's image plus one layer of what changed
// (a few MB here, not the ~280 MB of the whole file system), and holds exactly what the sandbox
// saw: new files with their modes (setuid), owners, symlinks, a hard link, a long name; changed
// image files (content, mode only, owner only); deleted image files and directories (whiteouts);
// a directory replaced by a file and a file by a directory. A snapshot of a sandbox made from a
// snapshot stacks one more layer and deletes a file of the layer below. Removing the snapshots
// (and the images with the agent derived from them) leaves no layer they made on the host.
constexpr const char* kLayerOne = R"SH(set -e
mkdir -p /opt/lt/a/b /opt/lt/empty-dir
head -c 300000 /dev/urandom > /opt/lt/a/f1 && head -c 100 /dev/urandom > /opt/lt/a/b/f2
chmod 4750 /opt/lt/a/f1 && chown 1234:2345 /opt/lt/a/b/f2 && chmod 600 /opt/lt/a/b/f2
: > /opt/lt/empty && ln -s a/b/f2 /opt/lt/rel-link && ln -s /etc/passwd /opt/lt/abs-link
ln /opt/lt/a/f1 /opt/lt/hard
echo long > /opt/lt/a/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
echo '# changed' >> /etc/apt/sources.list
chmod 600 /etc/apt/apt.conf.d/70debconf && chown 1234:2345 /etc/apt/auth.conf.d
rm /etc/apt/apt.conf.d/01autoremove && rm -r /usr/share/doc/adduser
rm -r /var/log/apt && echo now-a-file > /var/log/apt
rm /var/log/dpkg.log && mkdir /var/log/dpkg.log && echo in > /var/log/dpkg.log/x
)SH";
constexpr const char* kLayerTwo = R"SH(set -e
rm /opt/lt/a/b/f2 && rm -r /usr/share/doc/apt && echo '# again' >> /etc/apt/sources.list
echo second > /opt/lt/second && chmod 700 /opt/lt/empty-dir && rm /var/log/apt
)SH";

TEST_F(SnapshotTest, LayeredSnapshotsHoldWhatChangedDeletionsAndStackOnEachOther) {
  const std::vector<std::string> trees = {"/opt/lt", "/etc/apt", "/var/log", "/usr/share/doc"};
  auto hash = [&](Sandbox& sb) {
    std::vector<std::string> argv = {"sh", "-c", testing::kHashTrees, "sh"};
    argv.insert(argv.end(), trees.begin(), trees.end());
    auto r = sb.Exec(argv, {.timeout = 120});
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->err : r.error().ToString());
    return r.ok() ? r->out : "";
  };
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  auto base_image = (*docker)->InspectImage(std::string(kDefaultImage));
  ASSERT_TRUE(base_image.ok()) << base_image.error().ToString();
  const std::size_t base_layers = base_image->layers.size();

  auto a = MustCreate(TestSpec("layer-a"));
  ASSERT_TRUE(a);
  Sh(*a, kLayerOne);
  const std::string hash_a = hash(*a);
  SnapshotOptions o;
  o.image = Tag("layer1");
  auto one = a->Snapshot(o);
  ASSERT_TRUE(one.ok()) << one.error().ToString();
  std::cout << "[snapshot] layered, base image + 0.3 MB: " << one->bytes / 1e6 << " MB, "
            << one->entries << " entries, " << one->whiteouts << " whiteouts in " << one->seconds
            << " s\n";
  EXPECT_TRUE(one->layered) << one->whole_because;
  EXPECT_EQ(one->image_layers, base_layers + 1);
  EXPECT_GE(one->whiteouts, 2u);       // 01autoremove, doc/adduser
  EXPECT_LT(one->bytes, 20'000'000u);  // the whole file system is ~280 MB
  auto one_info = (*docker)->InspectImage(one->image);
  ASSERT_TRUE(one_info.ok());
  ASSERT_EQ(one_info->layers.size(), base_layers + 1);
  EXPECT_TRUE(
      std::equal(base_image->layers.begin(), base_image->layers.end(), one_info->layers.begin()));
  EXPECT_EQ(one_info->labels["agvisor.snapshot.of"], RunId() + "-layer-a");

  SandboxSpec sb = TestSpec("layer-b");
  sb.image = "snapshot:" + Tag("layer1");
  auto b = MustCreate(sb);
  ASSERT_TRUE(b);
  EXPECT_EQ(hash(*b), hash_a);
  const std::string checks =
      "ls /etc/apt/apt.conf.d/01autoremove /usr/share/doc/adduser 2>&1 | wc -l; cat "
      "/var/log/apt /var/log/dpkg.log/x; stat -c '%a %u:%g' /opt/lt/a/b/f2 "
      "/etc/apt/apt.conf.d/70debconf /etc/apt/auth.conf.d";
  EXPECT_EQ(Sh(*b, checks), "2\nnow-a-file\nin\n600 1234:2345\n600 0:0\n755 1234:2345\n");

  // A snapshot of the sandbox made from the snapshot: one layer more.
  Sh(*b, kLayerTwo);
  const std::string hash_b = hash(*b);
  o.image = Tag("layer2");
  auto two = b->Snapshot(o);
  ASSERT_TRUE(two.ok()) << two.error().ToString();
  EXPECT_TRUE(two->layered) << two->whole_because;
  EXPECT_EQ(two->image_layers, base_layers + 2);
  EXPECT_GE(two->whiteouts, 3u);  // f2 of the layer below, doc/apt, /var/log/apt
  SandboxSpec sc = TestSpec("layer-c");
  sc.image = "snapshot:" + Tag("layer2");
  auto c = MustCreate(sc);
  ASSERT_TRUE(c);
  EXPECT_EQ(hash(*c), hash_b);
  EXPECT_EQ(Sh(*c, "ls /opt/lt/a/b; cat /opt/lt/second; ls /var/log/apt 2>&1 | wc -l"),
            "second\n1\n");

  // Both are listed, with the sandbox each was made of.
  Runtime& runtime = *c->runtime();
  auto listed = ListSnapshots(runtime);
  ASSERT_TRUE(listed.ok()) << listed.error().ToString();
  std::map<std::string, std::string> of;
  for (const SnapshotInfo& s : *listed) of[s.tag] = s.of;
  EXPECT_EQ(of[Tag("layer1")], RunId() + "-layer-a");
  EXPECT_EQ(of[Tag("layer2")], RunId() + "-layer-b");

  // Removal (agvisor::RemoveSnapshot, every door's): refused while a sandbox runs from it,
  // naming it; then the snapshot and the images with the agent derived from it go. The layer
  // of the first stays while the second stacks on it; once both are gone no image on the host
  // holds a layer the snapshots made.
  auto two_info = (*docker)->InspectImage(two->image);
  ASSERT_TRUE(two_info.ok());
  const std::vector<std::string> made = {one_info->layers.back(), two_info->layers.back()};
  // Where Docker keeps the upper snapshot's own layer on this host (overlay2): gone at the end.
  auto upper = RunCommand(
      {"docker", "image", "inspect", "-f", "{{.GraphDriver.Data.UpperDir}}", two->image});
  ASSERT_TRUE(upper.ok() && upper->status.success());
  const std::filesystem::path layer_dir =
      std::filesystem::path(upper->out.substr(0, upper->out.find('\n'))).parent_path();
  ASSERT_TRUE(std::filesystem::exists(layer_dir)) << layer_dir;
  auto busy = RemoveSnapshot(runtime, Tag("layer2"));
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code(), ErrorCode::kConflict) << busy.error().ToString();
  EXPECT_THAT(busy.error().message(), HasSubstr("sandbox " + RunId() + "-layer-c (running)"));
  EXPECT_TRUE(ImageExists(two->image));
  auto layers_of_all_images = [] {
    auto all = RunCommand({"sh", "-c",
                           "docker image ls -aq --no-trunc | xargs -r docker image "
                           "inspect -f '{{range .RootFS.Layers}}{{.}} {{end}}'"});
    EXPECT_TRUE(all.ok());
    return all.ok() ? all->out : "";
  };
  for (auto* s : {a.get(), b.get(), c.get()}) ASSERT_TRUE(s->Stop().ok());
  auto removed = RemoveSnapshot(runtime, "snapshot:" + Tag("layer1"));
  ASSERT_TRUE(removed.ok()) << removed.error().ToString();
  EXPECT_FALSE(ImageExists(one->image));
  EXPECT_THAT(DerivedImagesOf(runtime, one_info->id), ::testing::IsEmpty());
  EXPECT_THAT(layers_of_all_images(), HasSubstr(made[0])) << "the second stacks on it";
  removed = RemoveSnapshot(runtime, Ref("layer2"));
  ASSERT_TRUE(removed.ok()) << removed.error().ToString();
  EXPECT_FALSE(ImageExists(two->image));
  EXPECT_THAT(DerivedImagesOf(runtime, two_info->id), ::testing::IsEmpty());
  EXPECT_FALSE(std::filesystem::exists(layer_dir)) << "Docker kept the layer's files";
  const std::string all = layers_of_all_images();
  for (const std::string& layer : made) {
    EXPECT_THAT(all, ::testing::Not(HasSubstr(layer))) << "a layer of a removed snapshot";
  }
  auto again = RemoveSnapshot(runtime, Tag("layer2"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code(), ErrorCode::kNotFound) << again.error().ToString();
}

// Stands in for the agent's read-file: a crafted tar on stdout, as /tmp/mode says.
constexpr std::string_view kHostileReadFile = R"PY(#!/usr/bin/python3
import sys
mode = open('/tmp/mode').read().strip()
def hdr(name, typ=b'0', size=0, link=b''):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b'0000644\0'
    h[108:116] = b'0000000\0'
    h[116:124] = b'0000000\0'
    h[124:136] = ('%011o' % size).encode() + b'\0'
    h[136:148] = b'00000000000\0'
    h[156:157] = typ
    h[157:157 + len(link)] = link
    h[257:265] = b'ustar\x0000'
    h[148:156] = b'        '
    h[148:156] = ('%06o' % sum(h)).encode() + b'\0 '
    return bytes(h)
out = sys.stdout.buffer
out.write(hdr(b'./', b'5'))
if mode == 'dotdot':
    out.write(hdr(b'./x/../../etc/evil', size=4) + b'evil'.ljust(512, b'\0'))
elif mode == 'oversize':
    out.write(hdr(b'./big', size=(1 << 33) - 1))
    out.write(b'\0' * (1 << 20))
elif mode == 'truncated':
    out.write(hdr(b'./short', size=1000) + b'only-a-few-bytes')
    out.flush()
    sys.exit(0)
elif mode == 'opaque':
    out.write(hdr(b'./etc/', b'5') + hdr(b'./etc/.wh..wh..opq'))
elif mode == 'symlink':
    out.write(hdr(b'./etc', b'2', link=b'/etc'))
    out.write(hdr(b'./etc/passwd', size=4) + b'evil'.ljust(512, b'\0'))
out.write(b'\0' * 1024)
)PY";

TEST_F(SnapshotTest, HostileStreamsAreRefusedAndLeaveNoImage) {
  auto sb = MustCreate(TestSpec("snap-hostile"));
  ASSERT_TRUE(sb);
  // Root inside replaces the agent binary (the running PID 1 keeps its own copy).
  ASSERT_TRUE(sb->WriteFile("/.agvisor/hostile", kHostileReadFile, 0755).ok());
  Sh(*sb, "mv -f /.agvisor/hostile /.agvisor/agvisor-agent");
  struct Case {
    const char* mode;
    ErrorCode code;
    const char* why;
  } cases[] = {
      {"dotdot", ErrorCode::kInvalidArgument, "'..' component"},
      {"oversize", ErrorCode::kResourceExhausted, "size cap"},
      {"truncated", ErrorCode::kInvalidArgument, "truncated"},
      {"symlink", ErrorCode::kInvalidArgument, "goes through the symlink './etc'"},
      // A layer takes whiteouts (DIR/.wh.NAME), never the opaque-directory marker.
      {"opaque", ErrorCode::kInvalidArgument, "whiteouts"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.mode);
    // This handle's channel is PID 1's own stdio (no relay runs the replaced binary).
    Sh(*sb, std::string("echo ") + c.mode + " > /tmp/mode");
    const std::string image = Ref(std::string("hostile-") + c.mode);
    SnapshotOptions o;
    o.image = Tag(std::string("hostile-") + c.mode);
    o.max_bytes = 64u << 20;
    const auto start = std::chrono::steady_clock::now();
    auto r = sb->Snapshot(o);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(r.ok()) << "a hostile stream was accepted";
    EXPECT_EQ(r.error().code(), c.code) << r.error().ToString();
    EXPECT_THAT(r.error().message(), HasSubstr(c.why));
    EXPECT_LT(s, 30.0);
    EXPECT_FALSE(ImageExists(image)) << "an image was left";
  }
  auto docker = ConnectDockerHost("");
  ASSERT_TRUE(docker.ok());
  auto left = (*docker)->ListImages({"agvisor.snapshot.of=" + RunId() + "-snap-hostile"});
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

// Issue 32 point 1. A hostile sandbox's snapshot, named as the caller was talked into: a tag in
// the snapshot repository that is no snapshot (the default image, tagged there by hand), the
// default image itself, a host container's image. Each is refused before a byte moves and the
// name still points to the image it did. The tag in the repository comes first: a build without
// the check replaces only that test-made tag (and each replaced name is put back at once).
TEST_F(SnapshotTest, NeverReplacesAnImageItDidNotMakeAsASnapshot) {
  auto sb = MustCreate(TestSpec("snap-tags"));
  ASSERT_TRUE(sb);
  Sh(*sb, "echo hostile > /opt/hostile");
  const std::string base(kDefaultImage);
  const std::string taken = Ref("taken");
  HandMadeTag tagged(taken);
  ASSERT_TRUE(tagged.ok()) << tagged.error();
  struct Case {
    std::string name;  // as the caller passes it
    std::string ref;   // the image that name would replace
    ErrorCode code;
    const char* why;
  } cases[] = {
      {taken, taken, ErrorCode::kConflict, "was not made as a snapshot"},
      {"snapshot:" + Tag("taken"), taken, ErrorCode::kConflict, "was not made as a snapshot"},
      {base, base, ErrorCode::kInvalidArgument, "outside agvisor's snapshot repository"},
      {"debian:bookworm", "debian:bookworm", ErrorCode::kInvalidArgument,
       "outside agvisor's snapshot repository"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string before = ImageId(c.ref);
    SnapshotOptions o;
    o.image = c.name;
    auto r = sb->Snapshot(o);
    const std::string after = ImageId(c.ref);
    if (after != before) {  // put the name back before anything else runs on this host
      (void)RunCommand(before.empty() ? std::vector<std::string>{"docker", "rmi", c.ref}
                                      : std::vector<std::string>{"docker", "tag", before, c.ref});
    }
    ASSERT_FALSE(r.ok()) << "a snapshot replaced " << c.ref;
    EXPECT_EQ(r.error().code(), c.code) << r.error().ToString();
    EXPECT_THAT(r.error().message(), HasSubstr(c.why));
    EXPECT_EQ(after, before) << c.ref << " points to another image";
  }
}

TEST_F(SnapshotTest, ForkOfTwoCopiesWorkspaceIntoIndependentSandboxes) {
  auto src = MustCreate(TestSpec("fork-src"));
  ASSERT_TRUE(src);
  const std::string hash =
      Sh(*src,
         "head -c 2000000 /dev/urandom > /workspace/data.bin && mkdir -p /workspace/sub && "
         "echo owned > /workspace/sub/owned && chown -R 1234:2345 /workspace/sub && "
         "echo rootfs > /opt/rootfs-change && sha256sum /workspace/data.bin");
  ForkOptions o;
  o.count = 2;
  o.prefix = RunId() + "-fk";
  o.image = Tag("fork");
  o.spec = TestSpec();
  auto f = Fork(*src, o);
  ASSERT_TRUE(f.ok()) << f.error().ToString();
  ASSERT_EQ(f->sandboxes.size(), 2u);
  std::cout << "[fork] of 2: " << f->seconds << " s (snapshot " << f->snapshot.seconds << " s, "
            << f->snapshot.bytes / 1000000.0 << " MB)\n";
  Sandbox& a = *f->sandboxes[0];
  Sandbox& b = *f->sandboxes[1];
  EXPECT_EQ(a.name(), RunId() + "-fk-1");
  EXPECT_EQ(b.name(), RunId() + "-fk-2");
  for (Sandbox* fork : {&a, &b}) {
    EXPECT_EQ(Sh(*fork, "sha256sum /workspace/data.bin"), hash);
    EXPECT_EQ(Sh(*fork, "cat /opt/rootfs-change; stat -c %u:%g /workspace/sub/owned"),
              "rootfs\n1234:2345\n");
  }
  // Independent: a write in one fork (in /workspace and in the root file system) is seen neither
  // in the other nor in the source.
  Sh(a,
     "echo only-a > /workspace/only-a && echo changed > /workspace/data.bin && echo a > "
     "/opt/rootfs-change");
  const std::string unchanged = "ls /workspace/only-a 2>/dev/null; sha256sum /workspace/data.bin";
  EXPECT_EQ(Sh(b, unchanged + "; cat /opt/rootfs-change"), hash + "rootfs\n");
  EXPECT_EQ(Sh(*src, unchanged + "; cat /opt/rootfs-change"), hash + "rootfs\n");
  // The names are taken now: a second fork with the same prefix is refused before anything.
  auto again = Fork(*src, o);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code(), ErrorCode::kConflict) << again.error().ToString();
}

class SnapshotFrontEndTest : public SnapshotTest {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/agvisor-snapshot-it-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = new std::string(tmpl);
    auto p = Subprocess::Spawn(
        {.argv = {"sh", "-c", "exec \"$0\" --socket \"$1\" --token-file \"$2\" 2>>\"$3\"",
                  AGVISORD_BINARY, *dir_ + "/agvisord.sock", *dir_ + "/token",
                  *dir_ + "/agvisord.log"}});
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    daemon_ = new Subprocess(std::move(*p));
    ASSERT_TRUE(testing::WaitFor(
        [] {
          return testing::ReadAll(*dir_ + "/agvisord.log").find("agvisord listening") !=
                 std::string::npos;
        },
        std::chrono::seconds(20)))
        << testing::ReadAll(*dir_ + "/agvisord.log");
  }
  static void TearDownTestSuite() {
    delete daemon_;  // kills and reaps
    daemon_ = nullptr;
    SnapshotTest::TearDownTestSuite();
    RemoveSnapshotsOf(RunId() + "-cli-src");
    if (dir_) std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  static inline std::string* dir_ = nullptr;
  static inline Subprocess* daemon_ = nullptr;
};

TEST_F(SnapshotFrontEndTest, TheCliSnapshotsWithProgressAndAgvisordForks) {
  auto src = MustCreate(TestSpec("cli-src"));
  ASSERT_TRUE(src);
  const std::string hash = Sh(*src,
                              "head -c 30000000 /dev/urandom > /opt/cli.bin && echo ws > "
                              "/workspace/ws && sha256sum /opt/cli.bin");
  // The CLI, in process: the image on stdout, progress and how to start from it on stderr.
  const std::string image = Ref("cli");
  auto cli = RunCommand({AGVISOR_CLI_BINARY, "snapshot", *src->name(), Tag("cli")});
  ASSERT_TRUE(cli.ok());
  EXPECT_TRUE(cli->status.success()) << cli->err;
  EXPECT_EQ(cli->out, image + "\n");
  EXPECT_THAT(cli->err, HasSubstr("checked and sent"));
  EXPECT_THAT(cli->err, HasSubstr("agvisor create --image snapshot:" + Tag("cli")));
  EXPECT_TRUE(ImageExists(image));
  // `create --image snapshot:TAG` starts from it.
  const std::string copy = RunId() + "-cli-copy";
  auto made = RunCommand({AGVISOR_CLI_BINARY, "create", "--name", copy, "--image",
                          "snapshot:" + Tag("cli"), "--disk", "none", "--memory", "256m", "--label",
                          std::string(testing::kRunLabel) + "=" + RunId()});
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE(made->status.success()) << made->err;
  auto copied = RunCommand({AGVISOR_CLI_BINARY, "exec", copy, "--", "sha256sum /opt/cli.bin"});
  ASSERT_TRUE(copied.ok());
  EXPECT_EQ(copied->out, hash) << copied->err;
  (void)RunCommand({AGVISOR_CLI_BINARY, "rm", copy});
  // Another repository's image: exit 2, nothing made.
  auto elsewhere = RunCommand({AGVISOR_CLI_BINARY, "snapshot", *src->name(), "debian:bookworm"});
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_EQ(elsewhere->status.exit_code, 2) << elsewhere->err;
  EXPECT_THAT(elsewhere->err, HasSubstr("agvisor/snapshot:TAG"));
  // A bad tag: exit 2 (invalid argument), nothing made.
  auto bad = RunCommand({AGVISOR_CLI_BINARY, "snapshot", *src->name(), "-bad"});
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status.exit_code, 2) << bad->err;
  // A size cap below the stream: exit 1, no image.
  const std::string capped = Ref("cli-capped");
  auto cap = RunCommand(
      {AGVISOR_CLI_BINARY, "snapshot", *src->name(), Tag("cli-capped"), "--max-size", "10m"});
  ASSERT_TRUE(cap.ok());
  EXPECT_EQ(cap->status.exit_code, 1) << cap->err;
  EXPECT_THAT(cap->err, HasSubstr("size cap"));
  EXPECT_FALSE(ImageExists(capped));

  // agvisord: a snapshot and a fork of one through its API.
  auto place = client::Agvisord("unix:" + *dir_ + "/agvisord.sock", *dir_ + "/token");
  ASSERT_TRUE(place.ok()) << place.error().ToString();
  auto h = (*place)->Open(src->container_name());
  ASSERT_TRUE(h.ok()) << h.error().ToString();
  SnapshotOptions so;
  so.image = Tag("daemon");
  auto snap = (*h)->Snapshot(so);
  ASSERT_TRUE(snap.ok()) << snap.error().ToString();
  EXPECT_EQ(snap->image, Ref("daemon"));
  EXPECT_GE(snap->file_bytes, 30000000u);
  ForkOptions fo;
  fo.count = 1;
  fo.prefix = RunId() + "-dfk";
  fo.image = Tag("daemon-fork");
  fo.spec = TestSpec();
  auto forked = (*place)->Fork(src->container_name(), fo);
  ASSERT_TRUE(forked.ok()) << forked.error().ToString();
  ASSERT_EQ(forked->sandboxes.size(), 1u);
  EXPECT_EQ(forked->sandboxes[0].name, RunId() + "-dfk-1");
  ExecOptions eo;
  auto r = forked->sandboxes[0].handle->Exec(
      {"sh", "-c", "sha256sum /opt/cli.bin; cat /workspace/ws"}, eo);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->out, hash + "ws\n");

  // Listing and removal: through agvisord, then the CLI in process.
  auto listed = (*place)->ListSnapshots();
  ASSERT_TRUE(listed.ok()) << listed.error().ToString();
  std::map<std::string, SnapshotInfo> by_tag;
  for (const SnapshotInfo& s : *listed) by_tag[s.tag] = s;
  ASSERT_TRUE(by_tag.count(Tag("daemon-fork")));
  EXPECT_TRUE(by_tag[Tag("daemon-fork")].workspace);
  EXPECT_EQ(by_tag[Tag("daemon")].of, *src->name());
  EXPECT_GT(by_tag[Tag("daemon")].size_bytes, 30'000'000);
  auto busy = (*place)->RemoveSnapshot(Tag("daemon-fork"));
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code(), ErrorCode::kConflict) << busy.error().ToString();
  EXPECT_THAT(busy.error().message(), HasSubstr("sandbox " + RunId() + "-dfk-1 (running)"));
  auto removed = (*place)->RemoveSnapshot(Tag("daemon"));
  ASSERT_TRUE(removed.ok()) << removed.error().ToString();
  EXPECT_FALSE(ImageExists(Ref("daemon")));
  auto ls = RunCommand({AGVISOR_CLI_BINARY, "--json", "snapshot", "ls"});
  ASSERT_TRUE(ls.ok());
  EXPECT_TRUE(ls->status.success()) << ls->err;
  EXPECT_THAT(ls->out, HasSubstr("\"image\":\"" + image + "\""));
  EXPECT_THAT(ls->out, ::testing::Not(HasSubstr(Ref("daemon") + "\"")));
  auto rm = RunCommand({AGVISOR_CLI_BINARY, "snapshot", "rm", Tag("cli")});
  ASSERT_TRUE(rm.ok());
  EXPECT_TRUE(rm->status.success()) << rm->err;
  EXPECT_FALSE(ImageExists(image));
}

// Snapshot removal takes agvisor's own snapshots only, by every door (the CLI in process and
// through agvisord): another repository's image, an image id, a path, and an image someone put
// in the snapshot repository by hand are refused and stay.
TEST_F(SnapshotFrontEndTest, RemoveRefusesEveryImageButItsOwnSnapshots) {
  const std::string base(kDefaultImage);
  const std::string base_id = ImageId(base);
  ASSERT_FALSE(base_id.empty());
  const std::string taken = Ref("rm-taken");
  HandMadeTag tagged(taken);
  ASSERT_TRUE(tagged.ok()) << tagged.error();
  const std::vector<std::string> daemon = {"--server", "unix:" + *dir_ + "/agvisord.sock",
                                           "--token-file", *dir_ + "/token"};
  for (bool through_daemon : {false, true}) {
    SCOPED_TRACE(through_daemon ? "through agvisord" : "in process");
    auto cli = [&](std::vector<std::string> args) {
      std::vector<std::string> argv = {AGVISOR_CLI_BINARY};
      if (through_daemon) argv.insert(argv.end(), daemon.begin(), daemon.end());
      argv.insert(argv.end(), args.begin(), args.end());
      auto r = RunCommand(argv);
      EXPECT_TRUE(r.ok());
      return r.ok() ? *r : CommandOutput{};
    };
    for (const std::string& other : {base, std::string("debian:bookworm"), base_id,
                                     std::string("../../agvisor/base"), "snapshot:" + base}) {
      SCOPED_TRACE(other);
      auto r = cli({"snapshot", "rm", other});
      EXPECT_EQ(r.status.exit_code, 2) << r.err;
      EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("outside agvisor's snapshot repository"),
                                          HasSubstr("is not a tag")));
    }
    auto r = cli({"snapshot", "rm", Tag("rm-taken")});
    EXPECT_EQ(r.status.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("was not made as a snapshot"));
    auto ls = cli({"--json", "snapshot", "ls"});
    EXPECT_TRUE(ls.status.success()) << ls.err;
    EXPECT_THAT(ls.out, ::testing::Not(HasSubstr(taken)));
    EXPECT_EQ(ImageId(base), base_id);
    EXPECT_EQ(ImageId(taken), base_id);
  }
}

}  // namespace
}  // namespace agvisor
