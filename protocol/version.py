"""The installed version of Maestro for Python, as peers report it in PING."""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["VERSION"]

try:
    VERSION = version("maestro-py")
except PackageNotFoundError:  # running from a source tree that was never installed
    VERSION = "0+unknown"
