"""Desktop sandboxes (gui=True) against real runsc: the VNC password, screenshots as PNG, mouse
input seen by the X server, keyboard input accepted, bad input refused, and desktop tokens that
the gateway's verifier reads back (and the seed's make_token). In process and through agvisord
(`av`, conftest.py): the verbs need only the sandbox handle (exec, files, the port stream)."""
import os
import re
import socket
import struct
import time

import pytest

import agvisor
from agvisor import Limits
from agvisor.desktop import Desktop, make_token

X = {"DISPLAY": ":0"}


@pytest.fixture(scope="module")
def sb(av):
    with av.create_sandbox(gui=True, limits=Limits(cpus=1, memory="1g"), network="none") as box:
        yield box


def pointer(sb):
    """Where the X server has the pointer: (x, y)."""
    r = sb.run(["xdotool", "getmouselocation", "--shell"], env=X, user="user", timeout=30)
    assert r.returncode == 0, r.stderr
    fields = dict(line.split("=", 1) for line in r.stdout.decode().split())
    return int(fields["X"]), int(fields["Y"])


def test_desktop_sandbox_attributes(sb):
    assert sb.gui and sb.image == "agvisor/desktop:latest"
    assert re.fullmatch(r"[A-Za-z0-9]{8}", sb.password)
    assert isinstance(sb.desktop, Desktop) and sb.desktop.password == sb.password
    assert sb.exec("echo still a sandbox").stdout == "still a sandbox\n"


def test_screenshot_is_a_png_of_the_screen(sb, tmp_path):
    width, height = sb.desktop.size()
    assert width >= 640 and height >= 480
    png = sb.desktop.screenshot(tmp_path / "screen.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    assert struct.unpack(">II", png[16:24]) == (width, height)
    assert (tmp_path / "screen.png").read_bytes() == png
    assert len(png) > 10_000  # a drawn desktop, not a blank frame


def test_mouse_input_reaches_the_x_server(sb):
    d = sb.desktop
    d.move(101, 202)
    assert pointer(sb) == (101, 202)
    d.drag(600, 500, 620, 530)
    assert pointer(sb) == (620, 530)
    d.double_click(640, 500)
    assert pointer(sb) == (640, 500)
    d.click(300, 400, button="right")
    assert pointer(sb) == (300, 400)
    d.key("Escape")  # closes what the right click opened
    d.scroll(640, 400, dy=3)
    d.scroll(640, 400, dy=-1, dx=1)
    assert pointer(sb) == (640, 400)
    d.type("agvisor 123")
    d.key("ctrl+a BackSpace")


def test_bad_input_is_refused(sb):
    d = sb.desktop
    with pytest.raises(ValueError):
        d.click(-1, 5)
    with pytest.raises(ValueError):
        d.click(5, 5, button="fourth")
    with pytest.raises(ValueError):
        d.key("Return; touch /tmp/x")
    assert sb.exec("test -e /tmp/x || echo absent").stdout == "absent\n"


def test_desktop_token_names_the_sandbox_and_its_password(sb):
    key = os.urandom(32)
    token = sb.desktop_token(key, ttl=120)
    payload = agvisor._core.verify_desktop_token(key, token)
    assert (payload["type"], payload["container"], payload["port"], payload["password"]) == (
        "vnc", sb.name, 5900, sb.password)
    assert 100_000 < payload["expiration_ms"] - time.time() * 1000 <= 120_000
    assert sb.desktop_token(key.hex()) != token  # hex keys work; every token has its own IV
    with pytest.raises(RuntimeError) as e:
        agvisor._core.verify_desktop_token(os.urandom(32), token)
    assert e.value.code == "permission_denied"
    with pytest.raises(ValueError):
        sb.desktop_token(key, ttl=0)
    # A handle from list_sandboxes() does not know it is a desktop: it asks the sandbox.
    listed_all = sb.connection.list_sandboxes() if sb.connection else agvisor.list_sandboxes()
    [listed] = [s for s in listed_all if s.name == sb.name]
    assert agvisor._core.verify_desktop_token(key, listed.desktop_token(key))["password"] == \
        sb.password


def test_headless_sandboxes_have_no_desktop(av):
    with av.create_sandbox(limits=Limits(cpus=1, memory="256m"), network="none") as box:
        with pytest.raises(ValueError, match="not a desktop"):
            box.desktop_token(os.urandom(32))
        with pytest.raises(RuntimeError):
            box.desktop.screenshot()


def test_seed_make_token():
    key = os.urandom(32)
    payload = agvisor._core.verify_desktop_token(key, make_token(key, 3390, "pw", ttl=60))
    assert payload["type"] == "rdp"
    assert '"port":"3390"' in payload["settings_json"]
    with pytest.raises(ValueError):
        make_token(b"short", 3390, "pw")


def test_rdp_port_reaches_xrdp_inside(sb):
    """sb.rdp_port: a loopback port this process forwards to xrdp in the sandbox (network none).
    An RDP connection request asking for TLS gets xrdp's confirm choosing TLS."""
    assert isinstance(sb.rdp_port, int) and 0 < sb.rdp_port < 65536
    request = bytes([3, 0, 0, 19, 14, 0xE0, 0, 0, 0, 0, 0, 1, 0, 8, 0, 1, 0, 0, 0])
    deadline = time.monotonic() + 30  # xrdp starts beside the desktop, not before "ready"
    while True:
        with socket.create_connection(("127.0.0.1", sb.rdp_port), timeout=30) as c:
            c.sendall(request)
            answer = b""
            while len(answer) < 19:
                chunk = c.recv(19 - len(answer))
                if not chunk:
                    break
                answer += chunk
        if answer or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert answer[:2] == b"\x03\x00" and answer[5] == 0xD0, answer  # TPKT, X.224 connection confirm
    assert answer[11] == 2 and answer[15] == 1, answer  # negotiation response: TLS
