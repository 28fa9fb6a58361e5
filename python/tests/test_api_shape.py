"""Our package against the seed's public API, compared programmatically.

seed_api.json is a snapshot of the seed package made by python/tools/seed_signatures.py (see its
docstring). Every module, function, class, method, dataclass field and default there must exist
here with the same str(inspect.signature(...)). Differences are listed in DIFFERENCES, each with
its reason; anything else that differs fails the test. Extras of ours are allowed and reported:
methods and classes, and keyword-only parameters with a default after the seed's parameters
(create_sandbox(..., egress=None)), which every call written for the seed leaves at the default.
"""
import dataclasses
import importlib
import inspect
import json
import os
import re

import pytest

SNAPSHOT = os.path.join(os.path.dirname(__file__), "seed_api.json")

# Where we differ from the seed on purpose. Keys are dotted paths into the snapshot.
DIFFERENCES = {
    "agvisor.sandbox.Sandbox.run_args": "the seed's `docker run` argv: agvisor speaks the Engine "
                                        "API and builds no docker command line",
}
# Instance attribute values that legitimately differ from the seed's defaults.
ATTRIBUTE_VALUES = {
    "image": "the default image is agvisor/base:latest (ubuntu:24.04 needs a registry)",
    "name": "random per instance",
}


def load_snapshot():
    with open(SNAPSHOT) as f:
        return json.load(f)


def seed_compatible(sig):
    """`sig` without its trailing keyword-only parameters that have defaults, one at a time, down
    to none: the signatures a seed caller cannot tell apart from `sig`, longest first."""
    yield sig
    params = list(sig.parameters.values())
    while params and params[-1].kind is inspect.Parameter.KEYWORD_ONLY \
            and params[-1].default is not inspect.Parameter.empty:
        params.pop()
        yield sig.replace(parameters=params)


def check_callable(path, seed_sig, ours, problems, extras=None):
    sig = inspect.signature(ours)
    for candidate in seed_compatible(sig):
        if str(candidate) == seed_sig:
            added = [p for p in sig.parameters if p not in candidate.parameters]
            if added and extras is not None:
                extras += [f"{path}({p}=...)" for p in added]
            return
    problems.append(f"{path}: signature {sig} != seed's {seed_sig}")


def check_class(path, seed, cls, problems, extras):
    check_callable(path, seed["signature"], cls, problems, extras)
    canonical = f"{seed['module']}.{cls.__name__}"  # the same class is re-exported by agvisor
    for method, sig in seed["methods"].items():
        mpath = f"{path}.{method}"
        if f"{canonical}.{method}" in DIFFERENCES:
            continue
        fn = cls.__dict__.get(method)
        if fn is None:
            problems.append(f"{mpath}: missing")
            continue
        check_callable(mpath, sig, fn, problems)
    for prop in seed["properties"]:
        if not isinstance(cls.__dict__.get(prop), property):
            problems.append(f"{path}.{prop}: property missing")
    if seed["dataclass"] is not None:
        if not dataclasses.is_dataclass(cls):
            problems.append(f"{path}: not a dataclass")
        else:
            if cls.__dataclass_params__.frozen != seed["dataclass"]["frozen"]:
                problems.append(f"{path}: frozen differs")
            mine = [{"name": f.name, "type": str(f.type),
                     "default": None if f.default is dataclasses.MISSING else repr(f.default)}
                    for f in dataclasses.fields(cls)]
            if mine != seed["dataclass"]["fields"]:
                problems.append(f"{path}: fields {mine} != seed's {seed['dataclass']['fields']}")
    if seed["instance_attributes"] is not None:
        instance = cls()
        attrs = vars(instance)
        for attr, value in seed["instance_attributes"].items():
            if attr not in attrs:
                problems.append(f"{path}().{attr}: missing")
            elif attr not in ATTRIBUTE_VALUES and repr(attrs[attr]) != value:
                problems.append(f"{path}().{attr} = {attrs[attr]!r}, seed's = {value}")


def compare():
    snapshot = load_snapshot()
    problems, extras = [], []
    for modname, seed_mod in snapshot["modules"].items():
        if modname in DIFFERENCES:
            continue
        try:
            mod = importlib.import_module(modname)
        except ImportError as e:
            problems.append(f"{modname}: cannot import ({e})")
            continue
        if seed_mod["all"] is not None and list(getattr(mod, "__all__", [])) != seed_mod["all"]:
            problems.append(f"{modname}.__all__ = {getattr(mod, '__all__', None)}, "
                            f"seed's = {seed_mod['all']}")
        for name, seed in seed_mod["names"].items():
            path = f"{modname}.{name}"
            if path in DIFFERENCES:
                continue
            ours = getattr(mod, name, None)
            if ours is None:
                problems.append(f"{path}: missing")
                continue
            if getattr(ours, "__module__", None) != seed["module"]:
                problems.append(f"{path}: defined in {ours.__module__}, seed's in {seed['module']}")
            if seed["kind"] == "class":
                if not inspect.isclass(ours):
                    problems.append(f"{path}: not a class")
                else:
                    check_class(path, seed, ours, problems, extras)
                    extras += [f"{path}.{m}" for m, v in vars(ours).items()
                               if not m.startswith("_") and callable(v)
                               and m not in seed["methods"]]
            else:
                check_callable(path, seed["signature"], ours, problems, extras)
    return problems, extras


def test_api_matches_the_seed_snapshot():
    problems, extras = compare()
    print("extensions of ours (allowed):", ", ".join(sorted(extras)) or "none")
    print("documented differences:", *(f"  {k}: {v}" for k, v in DIFFERENCES.items()), sep="\n")
    assert not problems, "API differs from the seed's:\n" + "\n".join(problems)


def test_snapshot_covers_the_seed_api():
    # Guards against an empty or truncated snapshot making the comparison vacuous.
    snapshot = load_snapshot()
    sandbox = snapshot["modules"]["agvisor.sandbox"]["names"]
    assert {"Sandbox", "create_sandbox", "list_sandboxes"} <= set(sandbox)
    assert {"start", "exec", "stop", "delete", "desktop_token", "__enter__", "__exit__"} <= set(
        sandbox["Sandbox"]["methods"])
    assert len(snapshot["modules"]["agvisor.limits"]["names"]["Limits"]["dataclass"]["fields"]) == 5


def test_a_changed_signature_is_caught(monkeypatch):
    # The comparison itself must notice a difference: break exec's signature and look.
    import agvisor.sandbox

    def exec(self, cmd, *, input=None, timeout=60, on_output=None):  # noqa: A001 - the API name
        raise AssertionError("never called")

    monkeypatch.setattr(agvisor.sandbox.Sandbox, "exec", exec)
    problems, _ = compare()
    assert any(re.search(r"Sandbox\.exec: signature .*timeout=60", p) for p in problems), problems


def test_only_optional_keywords_may_be_added(monkeypatch):
    # An extra keyword-only parameter with a default is an extension (seed calls still work);
    # one without a default, or a positional one, would break seed code and must be caught.
    import agvisor.sandbox

    original = agvisor.sandbox.create_sandbox
    seed_params = list(inspect.signature(original).parameters.values())
    seed_params = [p for p in seed_params
                   if p.name not in ("egress", "warm_shells", "platform", "idle_action")]
    extra = inspect.Parameter("extra", inspect.Parameter.KEYWORD_ONLY, default=None)

    def with_params(params):
        def fn(*args, **kwargs):
            raise AssertionError("never called")
        fn.__module__, fn.__qualname__ = original.__module__, original.__qualname__
        fn.__signature__ = inspect.signature(original).replace(parameters=params)
        return fn

    monkeypatch.setattr(agvisor.sandbox, "create_sandbox", with_params(seed_params + [extra]))
    problems, extras = compare()
    assert not problems, problems
    assert "agvisor.sandbox.create_sandbox(extra=...)" in extras, extras

    required = extra.replace(default=inspect.Parameter.empty)
    monkeypatch.setattr(agvisor.sandbox, "create_sandbox", with_params(seed_params + [required]))
    problems, _ = compare()
    assert any(re.search(r"sandbox\.create_sandbox: signature .*extra\)", p) for p in problems), \
        problems


def test_limits_defaults_and_disk_sentinel():
    from agvisor import Limits
    from agvisor.limits import is_default_disk

    assert Limits().disk == "5g" and repr(Limits().disk) == "'5g'"
    assert is_default_disk(Limits().disk)
    assert not is_default_disk(Limits(disk="5g").disk)  # explicit: a cap the caller asked for
    assert Limits(disk=None).disk is None  # uncapped on purpose
    assert is_default_disk(dataclasses.replace(Limits(), cpus=1).disk)  # the default survives
    with pytest.raises(dataclasses.FrozenInstanceError):
        Limits().cpus = 4


def test_the_installed_package_is_tested():
    import agvisor

    # python/test-wheel sets this: the tests must exercise the wheel, not the source tree.
    prefix = os.environ.get("AGVISOR_TEST_EXPECT_PREFIX")
    if prefix:
        assert os.path.realpath(agvisor.__file__).startswith(os.path.realpath(prefix) + "/")
