#include "agvisor/cli/help.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace agvisor::cli {
namespace {

constexpr CommandHelp kCommands[] = {
    {"create",
     "create and start a sandbox (or re-attach to a running one of the same --name); prints its "
     "name"},
    {"run",
     "create a sandbox, run a command in it with live output, then remove it (a named sandbox "
     "keeps its /workspace)"},
    {"exec",
     "run a command in a running sandbox, with live output; exits with the command's exit code"},
    {"ps", "list a sandbox's background processes (exec --detach), running and recently finished"},
    {"attach",
     "show a background process's kept output (its last 1 MiB), then its live output; exits with "
     "the process's exit code. Ctrl-C detaches (the process keeps running)"},
    {"kill", "send a signal (default TERM) to a background process's process group"},
    {"shell",
     "an interactive terminal in a running sandbox (bash if it has one, else sh; or the given "
     "command): raw mode, window size follows yours, Ctrl-C goes to the sandbox; exits with the "
     "shell's exit code"},
    {"cp",
     "copy a file or directory between this machine and a sandbox, by docker cp's rules: into DST "
     "when it is a directory (`agvisor cp ./src NAME:/workspace` makes /workspace/src); as DST "
     "when it does not exist (`agvisor cp f NAME:/tmp/new.txt` makes the file /tmp/new.txt, a "
     "directory copied so holds the source's contents); over DST when both are files. Sandbox "
     "paths are absolute, written NAME:/path. Downloads keep regular files, directories and links "
     "that stay inside the destination, drop setuid/setgid/sticky bits, and are all or nothing "
     "(docs/security.md; docs/cli.md, \"cp\")"},
    {"port-forward",
     "forward 127.0.0.1:LOCAL on this machine to port REMOTE on the sandbox's loopback (through "
     "the agent: works with --network none). Runs until interrupted; prints `forwarding "
     "127.0.0.1:PORT -> ...` once listening (LOCAL 0 picks a free port)"},
    {"desktop",
     "a --gui sandbox's desktop: without an action, print a 127.0.0.1 port and the VNC password "
     "for a native viewer and forward it through the agent channel (works with --network none) "
     "until Ctrl-C (--json: one JSON line {host, port, password, url}); --rdp: the same for a "
     "native RDP client (user 'user', the same password). Actions: password, size, screenshot "
     "FILE, move X Y, click X Y, drag X1 Y1 X2 Y2, scroll X Y DY [DX], type TEXT, key COMBO...; "
     "coordinates are pixels from the top left"},
    {"ls",
     "list every agvisor sandbox on the host, running or not (anonymous leftovers of crashed "
     "clients included), and the named ones that were stopped (state `stopped`: their /workspace "
     "kept; `create --name` resumes, `rm` erases)"},
    {"top",
     "CPU, memory and pids of every running sandbox on the host (the runtime's stats, one sample "
     "of about a second each, taken in parallel); --watch N repeats every N seconds"},
    {"egress",
     "a sandbox's egress policy and the recent decisions of its enforcer (agvisord); with "
     "--allow-domain, --deny-domain, --allow-cidr, --allow-port or --remove-domain, changes the "
     "policy of the running sandbox (new connections follow it at once); --egress learn|enforce "
     "switches the mode, --suggest prints the policy learn mode drew; --last N prints its "
     "egress log's last records, --follow follows the log (--json: JSON lines)"},
    {"stop", "remove sandboxes' containers; named ones keep their /workspace volume"},
    {"rm", "stop sandboxes and erase their /workspace volumes"},
    {"pause",
     "freeze sandboxes: their processes keep their memory and get no CPU until `agvisor resume` or "
     "the next call on them"},
    {"resume", "thaw paused sandboxes (one past its lifetime is ended instead)"},
    {"update",
     "resize a running sandbox in place: --cpus, --memory, --pids (enforced as at create; past the "
     "new memory the sandbox ends as out of memory). Docker hosts on this machine only: for an "
     "ssh:// host, go through its agvisord (--server). See docs/lifecycle.md"},
    {"snapshot",
     "make a snapshot of a sandbox's root file system as the sandbox sees it (its processes are "
     "not kept), the image agvisor/snapshot:TAG; `create --image snapshot:TAG` starts from it. "
     "`snapshot ls` lists them, `snapshot rm TAG` removes one (a sandbox named ls or rm: give "
     "its agvisor-... container name)"},
    {"snapshot ls",
     "list the snapshots on the host (images of the snapshot repository made as snapshots): tag, "
     "size, when, whether it holds /workspace, the sandbox it was made of"},
    {"snapshot rm",
     "remove snapshots with the images agvisor derived from them (the layers no other image "
     "holds go too); one a sandbox runs from is refused, naming it; any other image is refused"},
    {"fork",
     "snapshot a sandbox with its /workspace and start N named sandboxes from it, each with its "
     "own copy of /workspace (processes are not kept); prints their names"},
    {"watch",
     "print the changes under directory PATH inside a running sandbox as they happen, one per "
     "line: `create a.txt`, `modify a.txt`, `delete a.txt`, `move a.txt -> b.txt` (a trailing / "
     "marks a directory; paths are relative to PATH), `overflow` when events were lost because "
     "this reader was slow. With --json each line is an object {\"type\":\"event\", \"kind\", "
     "\"path\", \"is_dir\", \"old_path\" (moves)}. Recursive by default (new directories "
     "included). Runs until Ctrl-C, until PATH is deleted, or until the sandbox ends (exit code 3, "
     "saying why)"},
    {"image", "build the images sandboxes run"},
    {"doctor",
     "check a Docker host: docker and its API version, gVisor runtimes, a real sandbox start "
     "(timed), network modes, the sandbox firewall, root-disk caps, cgroups; or a kube:// host: "
     "the context and API server version, the namespace, the gVisor RuntimeClass, the RBAC "
     "permissions used, the images the nodes pull. Exits 1 when the host cannot run sandboxes"},
    {"network", "Docker networks that sandboxes may share"},
    {"network create",
     "make a bridge network that sandboxes join with `create --network NAME`: its members reach "
     "each other, while the host, other networks and private addresses stay closed to them (the "
     "sandbox firewall covers it). Other Docker networks are refused unless they are bridges with "
     "Docker's own interface naming"},
    {"mcp",
     "serve the Model Context Protocol on stdin/stdout for a coding agent (register the command "
     "`agvisor mcp`; docs/mcp.md). Sandboxes it creates are removed when the client goes away and "
     "end themselves at their lifetime"},
};

}  // namespace

std::span<const CommandHelp> CommandHelps() { return kCommands; }

CLI::App* AddCommand(CLI::App& parent, std::string_view path) {
  for (const CommandHelp& c : kCommands) {
    if (c.path != path) continue;
    const std::size_t space = path.rfind(' ');
    const std::string_view name = space == std::string_view::npos ? path : path.substr(space + 1);
    return parent.add_subcommand(std::string(name), std::string(c.help));
  }
  std::fprintf(stderr, "agvisor: no help text for subcommand '%.*s' (cli/help.cc)\n",
               static_cast<int>(path.size()), path.data());
  std::abort();
}

}  // namespace agvisor::cli
