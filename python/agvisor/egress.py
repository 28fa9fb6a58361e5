"""Egress policies: which names, address blocks and ports a sandbox may reach (docs/egress.md).

`Egress` is what `create_sandbox(egress=...)` takes (a plain list of domain patterns is turned into
one), checked by agvisor's C++ core when it is made. The policy is enforced outside the sandbox,
by agvisord on the Docker host; this module only describes it.
"""
import operator
from dataclasses import dataclass

from . import _core


def _strings(field, value):
    """A tuple of the rule strings in `value` (any iterable of str, not a str itself)."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"egress {field}: expected a list of strings, got the string {value!r} "
                        f"(write [{value!r}])")
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"egress {field}: expected a list of strings, got "
                        f"{type(value).__name__}") from None
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"egress {field}: expected strings, got {item!r}")
    return items


def _ports(value):
    if isinstance(value, (str, bytes, int)):
        raise TypeError(f"egress ports: expected a list of port numbers, got {value!r}")
    ports = []
    for p in value:
        if isinstance(p, bool):  # True would pass as port 1
            raise TypeError(f"egress ports: expected port numbers, got {p!r}")
        try:
            n = operator.index(p)
        except TypeError:
            raise TypeError(f"egress ports: expected port numbers, got {p!r}") from None
        if not 1 <= n <= 65535:
            raise ValueError(f"egress ports: {n} is not a port; ports are 1..65535")
        ports.append(n)
    return tuple(ports)


@dataclass(frozen=True)
class Egress:
    """An egress policy: the sandbox reaches what it allows and nothing else (deny by default).

    allow_domains  Names it may reach: "pypi.org" (that name only) or "*.pythonhosted.org"
                   (every name below it, not pythonhosted.org itself: list both for both).
                   A wildcard over a top-level domain ("*.com") and IP addresses are refused.
    allow_cidrs    Address blocks ("203.0.113.0/24", "2001:db8::/32"): the only way to reach an
                   IP address literal, or a private range an allowed name resolves to.
    ports          Destination ports allowed; empty = 80 and 443.
    deny_domains   Names refused even when an allow rule matches them (same pattern syntax).
    mode           "enforce" (the default) or "learn": what no rule allows is let through and
                   logged (never loopback, metadata, private ranges or the host), for drawing a
                   policy from a trusted run (`agvisor egress NAME --suggest`; docs/egress.md,
                   "Learn mode").

    Lists are kept as tuples, so a policy is immutable and reusable. A malformed rule raises
    ValueError naming it, a value of the wrong kind TypeError, both here, before any sandbox
    exists. `Egress()` allows nothing: the sandbox has a network that reaches no one.
    """

    allow_domains: tuple[str, ...] = ()
    allow_cidrs: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    deny_domains: tuple[str, ...] = ()
    mode: str = "enforce"

    def __post_init__(self):
        if not isinstance(self.mode, str):
            raise TypeError(f"egress mode: expected a string, got {self.mode!r}")
        for field in ("allow_domains", "allow_cidrs", "deny_domains"):
            object.__setattr__(self, field, _strings(field, getattr(self, field)))
        object.__setattr__(self, "ports", _ports(self.ports))
        _core.validate_egress(self._to_core())

    def _to_core(self):
        r = _core.EgressRules()
        r.allow_domains = list(self.allow_domains)
        r.allow_cidrs = list(self.allow_cidrs)
        r.ports = list(self.ports)
        r.deny_domains = list(self.deny_domains)
        r.mode = self.mode
        return r


def as_egress(egress):
    """`egress=` as an Egress: None stays None (no policy), a list of domain patterns becomes
    Egress(allow_domains=...)."""
    if egress is None or isinstance(egress, Egress):
        return egress
    if isinstance(egress, (str, bytes)):
        raise TypeError(f"egress takes a list of domain patterns or an agvisor.Egress, got the "
                        f"string {egress!r} (write egress=[{egress!r}])")
    if isinstance(egress, dict):
        raise TypeError("egress takes a list of domain patterns or an agvisor.Egress; for a "
                        "dict, write agvisor.Egress(**rules)")
    try:
        return Egress(allow_domains=egress)
    except TypeError as e:
        raise TypeError(f"egress takes a list of domain patterns or an agvisor.Egress: {e}") \
            from None


class Secret:
    """A brokered secret (docs/egress.md, "Secrets"), for create_sandbox(secrets=[...]).

    The sandbox sees only a placeholder in the environment variable `name`
    (NAME=agvsec_<random>); agvisord's egress enforcer puts the value into requests to `hosts`
    (exact names, each allowed by the sandbox's egress policy): in `Authorization` (Bearer,
    token, or the user or password of Basic) or, with `header`, that header. Give the value as
    `file` (read here, by this process) or `value`; give neither for a secret in agvisord's
    --secrets-file, by name. Needs agvisord (agvisor.connect()): in process, creating a sandbox
    with secrets is a RuntimeError (code "unsupported") saying how to start it. repr() never
    shows the value.
    """

    def __init__(self, name, hosts, *, value=None, file=None, header=""):
        if value is not None and file is not None:
            raise ValueError(f"secret {name}: give value= or file=, not both")
        if isinstance(hosts, (str, bytes)):
            raise TypeError(f"secret {name}: hosts is a list of names (write hosts=[{hosts!r}])")
        if file is not None:
            with open(file, encoding="utf-8") as f:  # this process's permissions
                value = f.read(16 * 1024)
            value = value[:-1] if value.endswith("\n") else value
            value = value[:-1] if value.endswith("\r") else value
        if value is not None and not isinstance(value, str):
            raise TypeError(f"secret {name}: value must be a str")
        self.name = name
        self.hosts = list(hosts)
        self.header = header
        self._value = value

    @property
    def by_name(self):
        """True when the value is the operator's (agvisord's --secrets-file)."""
        return self._value is None

    def __repr__(self):
        shown = "<operator's>" if self._value is None else "<hidden>"
        extra = f", header={self.header!r}" if self.header else ""
        return f"Secret({self.name!r}, hosts={self.hosts!r}{extra}, value={shown})"

    def _to_core(self):
        s = _core.SecretSpec()
        s.name = self.name
        s.hosts = list(self.hosts)
        s.header = self.header
        s.value = self._value
        return s


def as_secrets(secrets):
    """`secrets=` as a list of Secret (None: none)."""
    if secrets is None:
        return []
    if isinstance(secrets, Secret):
        raise TypeError("secrets takes a list: write secrets=[agvisor.Secret(...)]")
    out = list(secrets)
    for s in out:
        if not isinstance(s, Secret):
            raise TypeError(f"secrets takes agvisor.Secret objects, got {type(s).__name__}")
    return out
