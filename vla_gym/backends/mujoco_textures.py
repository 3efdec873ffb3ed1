"""How a MuJoCo scene's textures are decoded: the setting that keeps LIBERO's frames the same on every MuJoCo.

From MuJoCo 3.3.3 on, a texture has a colour space (``MjModel.tex_colorspace``), and image files such as LIBERO's
PNGs are decoded as sRGB: the same scene renders much darker (LIBERO-Object: mean brightness 103 against 139 of 255)
than on 2.3-3.3.2, whose frames LIBERO's datasets and published checkpoints were made with. Setting every texture
to linear and uploading the textures again gives the old frame back (mean absolute difference 0.05 per pixel;
docs/evaluation.md, "Which MuJoCo to run LIBERO on").

    >>> check_colorspace("linear")
    'linear'
    >>> check_colorspace("sRGB")
    Traceback (most recent call last):
    ...
    ValueError: texture_colorspace must be one of ['linear', 'auto'], got 'sRGB'

``linear`` is LIBERO's original look on every version; ``auto`` leaves the textures as this MuJoCo decodes them by
itself: on >= 3.3.3 the darker frames vla_gym's LIBERO checkpoints trained on MuJoCo 3.17 before Nov 26, 2026 saw,
on older versions the same as ``linear``. :func:`effective_colorspace` says which of the two looks an env gives.
"""
from __future__ import annotations

#: the colour spaces a LIBERO env offers (``texture_colorspace=``)
COLORSPACES = ("linear", "auto")


def check_colorspace(colorspace: str) -> str:
    """``colorspace`` if offered, else a ValueError naming the choices."""
    if colorspace not in COLORSPACES:
        raise ValueError(f"texture_colorspace must be one of {list(COLORSPACES)}, got {colorspace!r}")
    return colorspace


def has_colorspaces() -> bool:
    """Whether this MuJoCo gives textures a colour space (3.3.3 and later)."""
    import mujoco

    return hasattr(mujoco, "mjtColorSpace")


def effective_colorspace(colorspace: str) -> str:
    """The look ``colorspace`` gives on this MuJoCo: ``linear`` (LIBERO's original frames) or ``auto`` (MuJoCo
    >= 3.3.3's own decoding, darker); a checkpoint's contract records it."""
    return "auto" if colorspace == "auto" and has_colorspaces() else "linear"


def apply_colorspace(model, context, colorspace: str) -> None:
    """Decode every texture of ``model`` (an ``mujoco.MjModel``) as ``colorspace`` and upload them again to the
    render context ``context`` (an ``mujoco.MjrContext``, current on this thread). Nothing to do for ``auto``, on a
    MuJoCo without colour spaces (always linear) or when every texture is linear already."""
    if colorspace == "auto" or not has_colorspaces() or model.ntex == 0:
        return
    import mujoco

    linear = int(mujoco.mjtColorSpace.mjCOLORSPACE_LINEAR)
    if (model.tex_colorspace == linear).all():
        return
    model.tex_colorspace[:] = linear
    for texture in range(model.ntex):
        mujoco.mjr_uploadTexture(model, context, texture)
