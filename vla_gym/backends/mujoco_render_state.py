"""What a MuJoCo renderer reads of ``MjData``, kept per step so that a frame can be rendered later, bit for bit.

A MuJoCo camera image depends on the model and on the poses ``mj_forward`` / ``mj_step`` leave in ``MjData``
(bodies, geoms, sites, cameras, lights, tendon paths), not on ``qpos`` itself: after ``mj_step`` those poses are
the ones computed *before* the last integration, which is what an immediate render shows. Copying them (about
20 KB per step for a LIBERO scene, against 0.8 MB for the whole ``MjData``) and writing them back for the render
reproduces the immediate frame exactly; recomputing them from a saved ``qpos`` would not (it would show the state
one substep later).

    state = render_state(data)                 # after a step whose frame nobody needed yet
    ...                                        # more steps
    with rendered_as(data, state):             # the poses of that step, the simulation's own restored after
        frame = renderer_that_reads(data)

:class:`~vla_gym.wrappers.RecordEpisodes` uses it through ``Backend.render_snapshot()`` / ``render_from()`` to
render the skipped frames of an action chunk only for the episodes it keeps (``successes_only``).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

#: the ``MjData`` arrays ``mjv_updateScene`` reads for geometry, frames, cameras and lights (absent ones skipped)
RENDER_FIELDS = ("xpos", "xmat", "xquat", "xipos", "ximat", "subtree_com", "geom_xpos", "geom_xmat", "site_xpos",
                 "site_xmat", "cam_xpos", "cam_xmat", "light_xpos", "light_xdir", "ten_wrapadr", "ten_wrapnum",
                 "wrap_obj", "wrap_xpos", "flexvert_xpos", "flexelem_aabb", "actuator_length")


def render_state(data: Any) -> dict[str, np.ndarray]:
    """Copies of ``data``'s arrays that rendering reads (:data:`RENDER_FIELDS`)."""
    return {name: np.array(getattr(data, name), copy=True) for name in RENDER_FIELDS if hasattr(data, name)}


@contextlib.contextmanager
def rendered_as(data: Any, state: dict[str, np.ndarray]) -> Iterator[Any]:
    """Inside the block ``data`` shows the poses of ``state`` (from :func:`render_state`); after it, its own again."""
    own = render_state(data)
    try:
        for name, values in state.items():
            getattr(data, name)[...] = values
        yield data
    finally:
        for name, values in own.items():
            getattr(data, name)[...] = values
