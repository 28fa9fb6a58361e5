"""The examples of the seed README's "Use", "Resuming a sandbox" and "Expiry and cleanup"
sections, run as written against real runsc.

Each example below is the README's text. What the test changes, and why:
  - `ssh://user@my-vm` becomes the test sshd on 127.0.0.1 (conftest.sshd), which forwards to this
    machine's dockerd;
  - sandbox names ("my-project", "u42") get this run's id: the dockerd is shared with other runs;
  - `python:3.12` is agvisor/base:latest tagged under that name (no registry here);
  - in "Expiry and cleanup", list_sandboxes() is narrowed to this run's sandboxes, since the loop
    stops every sandbox it is given.
The desktop example (gui=True) asks for 4 CPUs: on a smaller host that is a ValueError naming
the limit (Docker's own check), so it runs as written and then with the limits this machine has,
`input` answered at once; it prints rdp_port (a loopback port this process forwards to the
desktop's RDP server through the agent channel) and the password.
Assertions on what each example promises follow the example, in test code.
"""
import os
import re
import textwrap

import pytest

import agvisor
import agvisor.sandbox
from conftest import unique

USE_HEADLESS = '''
from agvisor import Limits
from agvisor.sandbox import create_sandbox   # creates AND starts the sandbox

SMALL = Limits(cpus=1, memory="512m", pids=128)   # define once, reuse for any number of sandboxes

with create_sandbox(limits=SMALL, lifetime=3600) as sb:                      # headless
    r = sb.exec("python3 -c 'print(1+1)'", timeout=30)
    print(r.returncode, r.stdout)
'''

USE_DESKTOP = '''
with create_sandbox(gui=True, limits=Limits(cpus=4, memory="6g")) as sb:     # desktop
    print(f"RDP 127.0.0.1:{sb.rdp_port}  user=gnome  password={sb.password}")
    input("press enter to destroy")
'''

USE_REMOTE = '''
sb = create_sandbox(host="ssh://user@my-vm")   # same thing, on a remote VM/server (e.g. EC2, Azure)
sb.stop()                                      # without `with`, you stop it yourself
'''

RESUME_SESSION_1 = '''
with create_sandbox("python:3.12", name="my-project") as sb:   # session 1
    sb.exec("git clone https://github.com/me/repo && python -m venv .venv && .venv/bin/pip install -r repo/requirements.txt")
# the container is gone (CPU/RAM freed), /workspace is kept
'''

RESUME_SESSION_2 = '''
with create_sandbox("python:3.12", name="my-project") as sb:   # session 2, days later
    sb.exec("ls -a")                                            # -> repo/ .venv/   (cwd is /workspace)
'''

RESUME_FORGET = '''
create_sandbox(name="my-project").delete()          # forget it: erases the data too
'''

EXPIRY = '''
from agvisor import list_sandboxes

sb = create_sandbox(name="u42", idle_ttl=900, lifetime=4 * 3600)   # gone after 15 idle minutes, or 4h at most
for sb in list_sandboxes(host="ssh://user@my-vm"):                 # every agvisor sandbox on that docker host
    print(sb.name); sb.stop()                                      # exec(), stop() and delete() work on these handles
'''


def run_example(code, namespace, **replacements):
    for old, new in replacements.items():
        assert old in code, f"substitution {old!r} does not apply"
        code = code.replace(old, new)
    exec(compile(textwrap.dedent(code), "<seed README example>", "exec"), namespace)


class ExecSpy:
    """Records what Sandbox.exec returned, so the test can check what an example discards."""

    def __init__(self, monkeypatch):
        self.results = []
        real = agvisor.sandbox.Sandbox.exec

        def spy(sb, cmd, **kwargs):
            r = real(sb, cmd, **kwargs)
            self.results.append(r)
            return r

        monkeypatch.setattr(agvisor.sandbox.Sandbox, "exec", spy)


def running(name):
    return [sb for sb in agvisor.sandbox.list_sandboxes() if sb.name == name and sb._running]


def test_use_headless(capsys):
    ns = {}
    run_example(USE_HEADLESS, ns)
    assert capsys.readouterr().out == "0 2\n\n"
    assert not running(ns["sb"].name), "the with block must stop the sandbox"


def test_use_desktop(capsys):
    ns = {"input": lambda prompt="": print(prompt)}
    run_example(USE_HEADLESS.split("SMALL =")[0], ns)  # the example's imports
    if (os.cpu_count() or 1) < 4:
        with pytest.raises(ValueError, match="CPUs"):
            run_example(USE_DESKTOP, ns)
    run_example(USE_DESKTOP, ns, **{'cpus=4, memory="6g"': 'cpus=1, memory="1g"'})
    out = capsys.readouterr().out
    password = ns["sb"].password
    assert re.fullmatch(r"[A-Za-z0-9]{8}", password)
    assert re.fullmatch(rf"RDP 127\.0\.0\.1:\d+  user=gnome  password={password}\n"
                        r"press enter to destroy\n", out), out
    assert not running(ns["sb"].name)


def test_use_remote_host(sshd):
    ns = {}
    run_example(USE_HEADLESS.split("SMALL =")[0], ns)
    run_example(USE_REMOTE, ns, **{"ssh://user@my-vm": sshd})
    sb = ns["sb"]
    assert sb.host == sshd
    assert not running(sb.name)


def test_resuming_a_sandbox(image_alias, monkeypatch):
    image_alias("python:3.12")
    spy = ExecSpy(monkeypatch)
    name = unique("my-project")
    names = {'name="my-project"': f'name="{name}"'}
    ns = {"create_sandbox": agvisor.sandbox.create_sandbox}

    run_example(RESUME_SESSION_1, ns, **names)
    (clone,) = spy.results
    # No network to github.com here: the command runs and fails inside, like any command would.
    assert clone.returncode != 0 and "github.com" in clone.stderr
    assert not running(f"agvisor-{name}"), "the container is gone after the with block"

    # Test-only step: leave something in /workspace for session 2 to find.
    with agvisor.create_sandbox("python:3.12", name=name) as sb:
        assert sb.exec("mkdir repo .venv && echo kept > repo/file").returncode == 0

    run_example(RESUME_SESSION_2, ns, **names)
    ls = spy.results[-1]
    assert ls.returncode == 0 and {"repo", ".venv"} <= set(ls.stdout.split()), ls

    run_example(RESUME_FORGET, ns, **names)
    with agvisor.create_sandbox(name=name) as sb:  # erased: a fresh, empty /workspace
        assert sb.exec("ls -A").stdout == ""
    agvisor.Sandbox(name=name).delete()


def test_expiry_and_cleanup(sshd, only_this_run, capsys):
    name = unique("u42")
    ns = {"create_sandbox": agvisor.sandbox.create_sandbox}
    # Another sandbox of this run, so the loop has more than one handle to stop.
    other = agvisor.create_sandbox(limits=agvisor.Limits(memory="512m"))
    run_example(EXPIRY, ns, **{"ssh://user@my-vm": sshd, 'name="u42"': f'name="{name}"'})
    printed = capsys.readouterr().out.split()
    assert f"agvisor-{name}" in printed and other.name in printed
    assert not running(f"agvisor-{name}") and not running(other.name)
    # The named sandbox keeps its volume after stop(): the same name comes back with its files.
    with agvisor.create_sandbox(name=name, idle_ttl=900, lifetime=4 * 3600) as sb:
        assert not sb.resumed
        assert sb.exec("pwd").stdout == "/workspace\n"
    # Every handle list_sandboxes returns can delete.
    for sb in only_this_run(sshd):
        if sb.name == f"agvisor-{name}":
            sb.delete()
