"""agvisor.connect(): how a connection is made and what it refuses (docs/python.md, "Through
agvisord"). The verbs themselves run through the daemon in the other modules' tests, whose `av`
fixture is both `agvisor` and a connection (conftest.py)."""
import os

import pytest

import agvisor
from agvisor import Limits

SMALL = Limits(cpus=1, memory="512m")


def test_address_is_required_and_checked(monkeypatch):
    monkeypatch.delenv("AGVISOR_SERVER", raising=False)
    with pytest.raises(ValueError, match="AGVISOR_SERVER"):
        agvisor.connect()
    with pytest.raises(ValueError) as e:
        agvisor.connect("ftp://somewhere", token="t")
    assert e.value.code == "invalid_argument"


def test_nothing_listening_says_how_to_start_agvisord(tmp_path):
    with pytest.raises(RuntimeError, match="agvisord") as e:
        agvisor.connect(f"unix:{tmp_path}/none.sock", token="t")
    assert e.value.code == "unavailable"


def test_environment_as_the_cli_and_a_refused_token(agvisord_daemon, monkeypatch, tmp_path):
    monkeypatch.setenv("AGVISOR_SERVER", "unix:" + agvisord_daemon.socket)
    monkeypatch.setenv("AGVISOR_TOKEN_FILE", agvisord_daemon.token_file)
    conn = agvisor.connect()
    assert conn.address == "unix:" + agvisord_daemon.socket
    assert isinstance(conn.list_sandboxes(), list)
    bad = tmp_path / "bad-token"
    bad.write_text("not-the-token\n")
    monkeypatch.setenv("AGVISOR_TOKEN_FILE", str(bad))
    with pytest.raises(RuntimeError, match="bad-token") as e:
        agvisor.connect().list_sandboxes()
    assert e.value.code == "permission_denied"


def test_another_host_is_refused_through_agvisord(agvisord_daemon, recorder):
    """Sandboxes and pools live on the daemon's Docker host; desktops and pools themselves work
    through it (test_desktop.py, test_processes_pools.py run both ways)."""
    conn = agvisor.connect("unix:" + agvisord_daemon.socket, token=agvisord_daemon.token)
    before = recorder.names()
    with pytest.raises(ValueError, match="daemon's Docker host"):
        conn.create_sandbox(host="ssh://root@127.0.0.1")
    with pytest.raises(ValueError, match="daemon's Docker host"):
        conn.Pool(size=1, host="ssh://root@127.0.0.1")
    assert recorder.names() == before  # refused before anything was created
