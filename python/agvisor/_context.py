"""The context-manager protocol of the package's handles that end with close()."""


class ClosesOnExit:
    """`with handle:` gives the handle itself and calls its close() when the block ends, however
    it ends (close() is idempotent on every handle that uses this)."""

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()
