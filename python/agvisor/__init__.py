"""agvisor: throwaway gVisor (runsc) sandboxes for coding agents, from Python.

The API of the original agvisor package (Limits, Sandbox, create_sandbox, list_sandboxes), run by
agvisor's C++ core: Docker's Engine API spoken directly, an agent as PID 1 in every sandbox.

    from agvisor import Limits, create_sandbox
    with create_sandbox(limits=Limits(cpus=1, memory="512m")) as sb:
        print(sb.exec("python3 -c 'print(1+1)'").stdout)
"""
from .connection import Connection, connect
from .desktop import Desktop
from .egress import Egress, Secret
from .limits import Limits
from .pool import Pool, PoolStats
from .processes import Attachment, BackgroundProcess
from .sandbox import (Sandbox, create_sandbox, list_sandboxes, list_snapshots,
                      remove_snapshot)
from .streams import FileInfo, PortConnection, PortForward, Shell
from .watch import DirectoryWatch, WatchEvent

# The seed's names (test_api_shape). Extensions are importable too: connect and Connection
# (sandboxes through agvisord), Egress (egress policies),
# Pool and PoolStats (warm pools), and what the methods return: BackgroundProcess and Attachment
# (spawn, processes), Desktop (sb.desktop), FileInfo, PortConnection, PortForward and Shell
# (files, ports, shells), DirectoryWatch and WatchEvent (watch), list_snapshots and
# remove_snapshot (snapshots).
__all__ = ["Limits", "Sandbox", "create_sandbox", "list_sandboxes"]
__version__ = "0.1.0"
