"""Only here to mark the wheel as platform-specific: it carries a compiled extension that
setuptools did not build itself (see pyproject.toml and build-wheel)."""
from setuptools import setup
from setuptools.dist import Distribution


class _WithExtension(Distribution):
    def has_ext_modules(self):
        return True


setup(distclass=_WithExtension)
