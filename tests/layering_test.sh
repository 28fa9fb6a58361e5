#!/usr/bin/env bash
# Checks the layer arrows of docs/architecture.md: each folder of src/agvisor may include only
# itself and the layers listed for it. Run by CTest (label unit).
set -euo pipefail
cd "$(dirname "$0")/../src/agvisor"
declare -A allowed=(
  [base]=""
  [proto]="base"
  [http]="base"
  [egress]="base"
  [docker]="http base"
  [kube]="http base"
  [agent]="proto base"
  [channel]="proto base"
  [sandbox]="egress channel docker kube images http proto base"
  [images]="docker http base"
  [gateway]="sandbox egress channel docker http proto base"
)
# The gateway opens sandboxes through client/ (agvisord's shared handles, issue 34).
allowed[gateway]+=" client api"
# The caller seam and agvisord's pure API (issue 17 items 3-4): the CLI reaches sandboxes through
# client/ (in process or agvisord) and never includes the daemon; api/ (routes, codecs, default
# paths) is shared by the daemon and the client and does no I/O (checked below).
allowed[api]="sandbox egress channel docker http proto base"
# client/ and cli/ speak neither Docker nor image recipes: a host's own verbs (doctor, image build,
# volume sizes) run in the runtimes, reached through the factory (sandbox/runtimes.h) and the
# Runtime (issue 34); the runtimes' folders are refused below.
allowed[client]="api sandbox egress channel http proto base"
allowed[cli]="client api sandbox egress channel http proto base"
allowed[server]="api gateway sandbox egress channel docker http proto base"
# mcp/: the MCP server (docs/mcp.md) reaches sandboxes only through the client layer (and api/'s
# pure codecs), never docker/ or sandbox/ directly; `agvisor mcp` (cli/) and agvisord's /mcp
# (server/, over an in-process place) run it.
allowed[mcp]="client api base"
allowed[cli]+=" mcp"
allowed[server]+=" mcp client"
# e2b/: the E2B door (docs/e2b.md), a front end like mcp/: it reaches sandboxes through client/
# only (checked below with the other front ends), mounted on server/'s Server by daemon.cc.
allowed[e2b]="server client api sandbox egress base"
allowed[server]+=" e2b"
# desktop/: the pure desktop codecs (VNC, RFB, PNG, passwords, tokens) on base/ only, used by the
# desktop verbs (client/desktop.h), the sandbox's WaitReady, the gateway, agvisord and (passwords
# only) the agent.
allowed[desktop]="base"
for layer in sandbox gateway server client; do allowed[$layer]+=" desktop"; done
# The agent writes a desktop's password files: it may use desktop_password (des.h, password.h),
# on base/ alone, and nothing else of desktop/ (checked below).
allowed[agent]+=" desktop"
status=0
while IFS= read -r line; do
  echo "layering: ${line%%:*} includes more of desktop/ than des.h and password.h (the agent links desktop_password only)" >&2
  status=1
done < <(grep -rn '#include "agvisor/desktop/' agent | grep -vE 'agvisor/desktop/(des|password)\.h"' || true)
for dir in */; do
  layer=${dir%/}
  if [ -z "${allowed[$layer]+x}" ]; then
    echo "layering: src/agvisor/$layer is not in the layer table of tests/layering_test.sh" >&2
    status=1; continue
  fi
  while IFS= read -r line; do
    file=${line%%:*}
    dep=$(sed -E 's|.*#include "agvisor/([a-z0-9_]+)/.*|\1|' <<<"$line")
    [ "$dep" = "$layer" ] && continue
    if [[ " ${allowed[$layer]} " != *" $dep "* ]]; then
      echo "layering: $file includes agvisor/$dep/ (allowed for $layer: ${allowed[$layer]:-nothing})" >&2
      status=1
    fi
  done < <(grep -rn '#include "agvisor/' "$layer" || true)
done
# api/ is pure: no sockets, files, threads or Beast/Asio (its callers do the I/O; its tests may
# read the OpenAPI document).
while IFS= read -r line; do
  echo "layering: ${line%%:*} does I/O, but api/ is pure (move it to server/ or client/)" >&2
  status=1
done < <(grep -rnE '#include <(sys/socket\.h|sys/un\.h|netinet/|fstream|thread|future|boost/(asio|beast))' --exclude='*_test.cc' api || true)
# Inside sandbox/, only the Docker runtime (sandbox/docker_runtime/) speaks Docker: everything else
# there reaches where sandboxes run through sandbox/runtime.h (tests may build Docker's requests to
# pin them).
while IFS= read -r file; do
  case "$file" in
    sandbox/docker_runtime/*|*_test.cc) ;;
    *) echo "layering: $file includes agvisor/docker/ (in sandbox/ only docker_runtime/ may)" >&2
       status=1 ;;
  esac
done < <(grep -rl '#include "agvisor/docker/' sandbox || true)
# Likewise only the Kubernetes runtime (sandbox/kube_runtime/) speaks Kubernetes.
while IFS= read -r file; do
  case "$file" in
    sandbox/kube_runtime/*|*_test.cc) ;;
    *) echo "layering: $file includes agvisor/kube/ (in sandbox/ only kube_runtime/ may)" >&2
       status=1 ;;
  esac
done < <(grep -rl '#include "agvisor/kube/' sandbox || true)
# The daemon, its gateway and MCP reach sandboxes through client/ (one Place): none speaks Docker
# or includes the Docker runtime, but for the one place that makes the Docker side of the egress
# enforcers (server/daemon.cc; tests may reach the runtime's pure helpers).
while IFS= read -r file; do
  case "$file" in
    server/daemon.cc|*_test.cc) ;;
    *) echo "layering: $file includes agvisor/docker/ or sandbox/docker_runtime/ (only server/daemon.cc may, to make the egress enforcers' Docker side)" >&2
       status=1 ;;
  esac
done < <(grep -rlE '#include "agvisor/(docker|sandbox/docker_runtime)/' server gateway mcp e2b || true)
# Inside sandbox/, images/ (the recipes image builds follow) is the Docker runtime's and the
# factory's, which names the default images (runtimes.h: BuildHostImage, DefaultImageName).
while IFS= read -r file; do
  case "$file" in
    sandbox/docker_runtime/*|sandbox/runtimes.cc|*_test.cc) ;;
    *) echo "layering: $file includes agvisor/images/ (in sandbox/ only docker_runtime/ and runtimes.cc may)" >&2
       status=1 ;;
  esac
done < <(grep -rl '#include "agvisor/images/' sandbox || true)
# client/ and cli/ reach a host only through the factory (runtimes.h) and the Runtime it makes:
# neither includes a runtime's folder, so no address test or Docker call sits there (issue 34).
while IFS= read -r line; do
  echo "layering: ${line%%:*} includes ${line#*#include } (client/ and cli/ reach hosts through sandbox/runtimes.h and runtime.h)" >&2
  status=1
done < <(grep -rnE '#include "agvisor/sandbox/(docker|kube)_runtime/' client cli || true)
# The address forms are the factory's alone: no other code asks whether a host is Kubernetes.
while IFS= read -r line; do
  echo "layering: ${line%%:*} tests a host address (IsKubernetesHost); only sandbox/runtimes.* may: give the decision to the factory or the Runtime" >&2
  status=1
done < <(grep -rn 'IsKubernetesHost' --exclude='*_test.cc' --exclude='runtimes.h' --exclude='runtimes.cc' . ../../apps ../../python/src || true)
# The sandbox core (the files directly in sandbox/, target agvisor_sandbox) and the fake
# (sandbox/testing/) link neither runtime: they reach a host only through the Runtime they are
# given (runtime.h). Only the factory (runtimes.h/.cc, target agvisor_sandbox_runtimes) includes
# both runtimes; tests may pin a runtime's requests.
while IFS= read -r line; do
  file=${line%%:*}
  case "$file" in
    sandbox/runtimes.cc|sandbox/runtimes.h|*_test.cc) ;;
    *) echo "layering: $file includes a runtime (${line#*#include }); the sandbox core reaches hosts through runtime.h only" >&2
       status=1 ;;
  esac
done < <(grep -Hn '#include "agvisor/sandbox/\(docker\|kube\)_runtime/' sandbox/*.h sandbox/*.cc \
           sandbox/testing/* || true)
# One door (issue 34): the front ends (cli/, server/, mcp/, gateway/ and the Python package's core,
# python/src) reach sandboxes through client/'s Place and SandboxHandle. None includes the Sandbox
# class (sandbox/sandbox.h: the values they pass and read are sandbox/types.h's) or docker/ (tests
# may drive the library directly).
while IFS= read -r line; do
  echo "layering: ${line%%:*} includes ${line#*#include } (front ends reach sandboxes through client/place.h; values are in sandbox/types.h)" >&2
  status=1
done < <(grep -rnE '#include "agvisor/(sandbox/sandbox\.h|docker/)' --exclude='*_test.cc' \
           cli server mcp gateway e2b ../../python/src || true)
[ $status = 0 ] && echo "layering: ok"
exit $status
