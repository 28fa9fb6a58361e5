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


def test_what_does_not_go_through_agvisord_is_refused_clearly(agvisord_daemon, recorder):
    conn = agvisor.connect("unix:" + agvisord_daemon.socket, token=agvisord_daemon.token)
    with pytest.raises(ValueError, match="daemon's Docker host"):
        conn.create_sandbox(host="ssh://root@127.0.0.1")
    before = recorder.names()
    for make in (lambda: conn.create_sandbox(gui=True, limits=Limits(cpus=1, memory="1g")),
                 lambda: conn.Pool(size=1)):
        with pytest.raises(RuntimeError, match="agvisord") as e:
            make()
        assert e.value.code == "unsupported"
    assert recorder.names() == before  # refused before anything was created
    with conn.create_sandbox(limits=SMALL) as sb:
        assert sb.connection is conn
        with pytest.raises(RuntimeError, match="through agvisord") as e:
            sb.desktop.screenshot()
        assert e.value.code == "unsupported"
        with pytest.raises(RuntimeError, match="through agvisord") as e:
            sb.desktop_token(os.urandom(32))
        assert e.value.code == "unsupported"
