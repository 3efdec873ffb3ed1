"""What the MuJoCo-based backends (LIBERO, Meta-World) share about offscreen OpenGL: the error that names the fix.

    >>> from vla_gym.backends.mujoco_gl import explain_gl_errors
    >>> with explain_gl_errors():
    ...     raise RuntimeError("Failed to initialize OpenGL: EGL_BAD_DISPLAY")
    Traceback (most recent call last):
    ...
    vla_gym.core.errors.RenderingUnavailableError: MuJoCo cannot render offscreen with MUJOCO_GL=...

:class:`OpenRenderContexts` frees the render contexts of envs still open at interpreter exit while EGL still runs.
``MUJOCO_GL`` itself is chosen by :func:`vla_gym.runtime.system.configure_mujoco_gl` before MuJoCo is imported.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import weakref

from vla_gym.core.errors import RenderingUnavailableError
from vla_gym.runtime.system import install_hint

#: words in MuJoCo's (and robosuite's) errors when offscreen OpenGL is unusable
GL_ERROR = re.compile(r"MUJOCO_GL|EGL|OSMesa|OpenGL|GLFW|gl_context|render context", re.IGNORECASE)


@contextlib.contextmanager
def explain_gl_errors():
    """Turn MuJoCo's OpenGL failures into an error that names MUJOCO_GL and the packages."""
    try:
        yield
    except Exception as exc:  # RuntimeError, ImportError, OSError, mujoco.FatalError, ...
        if not GL_ERROR.search(str(exc)):
            raise
        raise RenderingUnavailableError(
            f"MuJoCo cannot render offscreen with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}: {exc}\n"
            "Use MUJOCO_GL=egl (the default vla_gym sets) or MUJOCO_GL=osmesa, with the libraries installed.\n"
            "MuJoCo reads MUJOCO_GL when it is first imported: if something imported mujoco before vla_gym made "
            "its first env, export MUJOCO_GL=egl before starting Python.\n"
            + install_hint()
        ) from exc


class OpenRenderContexts:
    """Backends with an open MuJoCo render context, closed (``backend.close()``) at interpreter exit.

    The EGL display is terminated by an atexit handler (MuJoCo's, robosuite's); a render context freed after that,
    by garbage collection at exit, prints "Exception ignored in ...__del__ ... EGLError". atexit runs the last
    registered handler first, and :meth:`add` (re-)registers this one whenever the set was empty, after the
    simulator set EGL up: so an env left open is closed while EGL still runs.
    """

    def __init__(self):
        self._open: weakref.WeakSet = weakref.WeakSet()

    def add(self, backend) -> None:
        if not self._open:
            atexit.unregister(self.close_all)
            atexit.register(self.close_all)
        self._open.add(backend)

    def discard(self, backend) -> None:
        self._open.discard(backend)

    def close_all(self) -> None:
        for backend in list(self._open):
            backend.close()

