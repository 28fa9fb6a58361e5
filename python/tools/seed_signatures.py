#!/usr/bin/env python3
"""Writes a JSON snapshot of a Python package's public API, for the API-shape test.

    python/tools/seed_signatures.py SEED_ROOT > python/tests/seed_api.json

SEED_ROOT is the directory that contains the seed's `agvisor` package (the one the seed's wheel
installs). The snapshot is checked in, so the test never needs the seed itself: it compares our
package against this file (python/tests/test_api_shape.py). Re-run it only when the seed changes.

What is recorded, per module (agvisor, agvisor.limits, agvisor.sandbox, agvisor.desktop):
  - `__all__`, when the module has one;
  - every public function and class the module defines or lists in `__all__`, with
    str(inspect.signature(...)) (defaults and annotations included);
  - for a class: its public methods and the special methods a user relies on (`__init__`,
    `__enter__`, `__exit__`), its properties, its dataclass fields (name, type, default, frozen),
    and, when it can be built with no arguments, the public attributes of such an instance with
    the repr of their values.
Module-level constants are not recorded: the seed only has private ones and desktop constants.
"""
import dataclasses
import importlib
import inspect
import json
import sys

MODULES = ["agvisor", "agvisor.limits", "agvisor.sandbox", "agvisor.desktop"]
SPECIAL_METHODS = ["__init__", "__enter__", "__exit__"]


def describe_callable(obj):
    return str(inspect.signature(obj))


def describe_class(cls):
    info = {"kind": "class", "signature": describe_callable(cls), "methods": {},
            "properties": [], "dataclass": None, "instance_attributes": None}
    for attr, value in sorted(vars(cls).items()):
        if isinstance(value, property) and not attr.startswith("_"):
            info["properties"].append(attr)
        elif inspect.isfunction(value) and (not attr.startswith("_") or attr in SPECIAL_METHODS):
            info["methods"][attr] = describe_callable(value)
    if dataclasses.is_dataclass(cls):
        fields = []
        for f in dataclasses.fields(cls):
            default = None if f.default is dataclasses.MISSING else repr(f.default)
            fields.append({"name": f.name, "type": str(f.type), "default": default})
        info["dataclass"] = {"frozen": cls.__dataclass_params__.frozen, "fields": fields}
    try:
        instance = cls()  # the seed's constructors are pure (no docker call): safe to build
    except Exception:  # noqa: BLE001 - a class that needs arguments simply has no attribute list
        instance = None
    if instance is not None and hasattr(instance, "__dict__"):
        info["instance_attributes"] = {k: repr(v) for k, v in sorted(vars(instance).items())
                                       if not k.startswith("_")}
    return info


def describe_module(name):
    mod = importlib.import_module(name)
    exported = getattr(mod, "__all__", None)
    names = {}
    for attr, value in sorted(vars(mod).items()):
        if attr.startswith("_"):
            continue
        listed = exported is not None and attr in exported
        own = getattr(value, "__module__", None) == name
        if inspect.isclass(value) and (own or listed):
            names[attr] = describe_class(value)
            names[attr]["module"] = value.__module__
        elif inspect.isfunction(value) and (own or listed):
            names[attr] = {"kind": "function", "signature": describe_callable(value),
                           "module": value.__module__}
    return {"all": list(exported) if exported is not None else None, "names": names}


def main(argv):
    if len(argv) != 2:
        sys.exit(f"usage: {argv[0]} SEED_ROOT > seed_api.json")
    sys.path.insert(0, argv[1])
    snapshot = {"python": sys.version.split()[0],
                "modules": {name: describe_module(name) for name in MODULES}}
    json.dump(snapshot, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv)
