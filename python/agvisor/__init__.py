"""agvisor: throwaway gVisor (runsc) sandboxes for coding agents, from Python.

The API of the original agvisor package (Limits, Sandbox, create_sandbox, list_sandboxes), run by
agvisor's C++ core: Docker's Engine API spoken directly, an agent as PID 1 in every sandbox.

    from agvisor import Limits, create_sandbox
    with create_sandbox(limits=Limits(cpus=1, memory="512m")) as sb:
        print(sb.exec("python3 -c 'print(1+1)'").stdout)
"""
from .limits import Limits
from .sandbox import Sandbox, create_sandbox, list_sandboxes
from .streams import FileInfo, PortConnection, PortForward, Shell

# The seed's names (test_api_shape); FileInfo, PortConnection, PortForward and Shell, what the
# file, port and terminal methods return, are importable too.
__all__ = ["Limits", "Sandbox", "create_sandbox", "list_sandboxes"]
__version__ = "0.1.0"
