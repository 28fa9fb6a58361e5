"""python/build-wheel's guard (issue 33): run from a directory holding a CMake `build/` tree (the
repository root), `import build` found that directory as a namespace package, so an interpreter
without python3-build passed the guard and failed later with "No module named build.__main__".
The guard now asks `python -m build --version` from /, and says what to install."""
import os
import pathlib
import subprocess
import sys

BUILD_WHEEL = pathlib.Path(__file__).resolve().parents[1] / "build-wheel"
DIST = pathlib.Path("/usr/lib/python3/dist-packages")


def test_guard_is_not_fooled_by_a_build_directory(tmp_path):
    # An interpreter with setuptools and wheel but no `build` package: python -S (no
    # site-packages) with only those two on its path.
    site = tmp_path / "site"
    site.mkdir()
    for name in ("setuptools", "pkg_resources", "_distutils_hack", "wheel"):
        (site / name).symlink_to(DIST / name)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -S \"$@\"\n")
    python.chmod(0o755)
    tree = tmp_path / "tree"
    (tree / "python/package/agvisor").mkdir(parents=True)
    (tree / "python/package/agvisor/_core.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\0")
    (tree / "CMakeCache.txt").write_text(f"Python3_EXECUTABLE:FILEPATH={python}\n")
    # The caller stands where a `build/` directory is, as at the repository root.
    (tmp_path / "build").mkdir()
    r = subprocess.run([str(BUILD_WHEEL), str(tree)], cwd=tmp_path, capture_output=True,
                       text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert r.returncode == 1, r.stderr
    assert "lacks build/setuptools/wheel" in r.stderr
    assert "apt-get install python3-build" in r.stderr
