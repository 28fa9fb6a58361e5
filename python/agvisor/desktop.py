"""Desktops: what Sandbox.desktop returns for a gui=True sandbox, and the seed's make_token.

A desktop sandbox (image agvisor/desktop:latest unless told otherwise) runs Xvnc on display :0
and an xfce session of the desktop user; its VNC server is reached through the agent channel only
(it works with network="none"). Screenshots are one VNC framebuffer capture each, made into PNG
by the C++ core; mouse and keys are xdotool as the desktop user (one command each), typed text is
VNC key events (any characters; see docs/desktop.md). Every call releases the
GIL. Coordinates are screen pixels from the top left. Errors: ValueError for a bad argument
(negative coordinates, an unknown button, a key combo with characters outside [A-Za-z0-9_+ ]),
RuntimeError for the rest (code "not_found" when the sandbox is not a desktop).
"""
import json
import math
import os

from . import _core

# The seed's desktop user, named in its RDP tokens.
_SEED_RDP_USER = "gnome"

# The RDP port inside a desktop sandbox: xrdp in front of the desktop's Xvnc, the same password
# as VNC, any user name. Sandbox.rdp_port is a loopback port on this machine forwarded to it.
RDP_PORT = 3389


def make_token(key: bytes, rdp_port: int, password: str, ttl: int = 300) -> str:
    """The seed's RDP token (its format: AES-256-CBC + HMAC-SHA256 under `key`, the 32-byte
    gateway secret) for an RDP server on 127.0.0.1:rdp_port, valid for `ttl` seconds. Kept for
    code written against the seed; agvisor's gateway speaks VNC and refuses RDP tokens: for an
    agvisor desktop use Sandbox.desktop_token(key)."""
    if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
        raise ValueError("key must be exactly 32 bytes (the gateway's secret, hex-decoded)")
    settings = {"hostname": "127.0.0.1", "port": str(int(rdp_port)), "username": _SEED_RDP_USER,
                "password": str(password), "security": "any", "ignore-cert": True,
                "resize-method": "display-update"}
    return _core.mint_token(bytes(key), "rdp", json.dumps(settings), math.ceil(ttl))


class Desktop:
    """sb.desktop: the screen, mouse and keyboard of a desktop sandbox."""

    def __init__(self, sandbox):
        self._sandbox = sandbox

    def _core(self):
        return self._sandbox._handle()

    @property
    def password(self) -> str:
        """The VNC password (8 characters, new for every container); read from inside."""
        return self._core().desktop_password()

    def screenshot(self, path=None) -> bytes:
        """The whole screen as PNG bytes; also written to `path` when given."""
        png = self._core().screenshot()
        if path is not None:
            with open(os.fspath(path), "wb") as f:
                f.write(png)
        return png

    def size(self) -> tuple[int, int]:
        """(width, height) of the screen in pixels."""
        return tuple(self._core().screen_size())

    def move(self, x, y) -> None:
        """Moves the mouse pointer to (x, y)."""
        self._core().mouse_move(int(x), int(y))

    def click(self, x, y, button="left", count=1) -> None:
        """Moves to (x, y) and clicks `button` ("left", "middle", "right") `count` times."""
        self._core().click(int(x), int(y), str(button), int(count))

    def double_click(self, x, y, button="left") -> None:
        self.click(x, y, button, 2)

    def drag(self, x1, y1, x2, y2, button="left") -> None:
        """Presses `button` at (x1, y1), moves to (x2, y2) and releases."""
        self._core().drag(int(x1), int(y1), int(x2), int(y2), str(button))

    def scroll(self, x, y, dy=1, dx=0) -> None:
        """Moves to (x, y) and turns the wheel: dy > 0 down, < 0 up; dx > 0 right, < 0 left
        (wheel steps)."""
        self._core().scroll(int(x), int(y), int(dy), int(dx))

    def type(self, text) -> None:
        """Types `text` (any Unicode) into the focused window."""
        self._core().type_text(str(text))

    def key(self, combo) -> None:
        """Presses a key combination in xdotool's names: "Return", "ctrl+alt+t",
        "ctrl+shift+Tab"; several separated by spaces are pressed in turn."""
        self._core().key(str(combo))

    def __repr__(self):
        return f"<agvisor.Desktop of {self._sandbox.name}>"
