"""Image helpers for cameras and videos: resizing, the multi-camera frame layout, the text overlay.

Needs only numpy and Pillow (imported when first used, never by ``import vla_gym``).

The video layout puts the main camera large on the right and the other cameras (wrists) stacked
in a column on the left; a translucent band at the top of the main image shows the instruction,
one at the bottom shows step, reward, return and success::

    two wrists (BEHAVIOR)         one wrist (LIBERO, ManiSkill)   main only
    +-------+-------------+       +-------+-------------+         +-------------+
    | left  |             |       | wrist |             |         |             |
    | 224   |  main 448   |       | 224   |  main 448   |         |  main 448   |
    +-------+             |       +-------+             |         |             |
    | right |             |       | black |             |         |             |
    +-------+-------------+       +-------+-------------+         +-------------+
        448 x 672 (H x W)             448 x 672                       448 x 448

One wrist keeps the two-wrist frame size (the slot below it stays black), so every single-arm video
has one size. More side cameras than fit in 448 px make the column (and the frame) taller.

    >>> import numpy as np
    >>> from vla_gym.core.video import video_frame
    >>> images = {"main": np.zeros((224, 224, 3), np.uint8), "wrist": np.zeros((128, 128, 3), np.uint8)}
    >>> video_frame(images, instruction="open the drawer", step=3, reward=0.0, episode_return=0.0,
    ...             success=False).shape
    (448, 672, 3)
"""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np

MAIN_SIZE = 448  #: side of the main camera in a video frame
SIDE_SIZE = 224  #: side of each other camera in the left column
MAIN_ROLE = "main"


def _pil():
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError as exc:  # pragma: no cover - Pillow ships with every extra that records video
        raise ImportError('resizing images and drawing video overlays need Pillow: pip install "pillow>=10.1"') from exc
    return Image, ImageDraw, ImageFont


def resize_image(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize a uint8 (H, W, 3) image to ``size`` = (height, width) with antialiased bilinear filtering.

    Returns ``image`` itself when it already has that size.
    """
    height, width = size
    if image.shape[:2] == (height, width):
        return image
    Image, _, _ = _pil()
    return np.asarray(Image.fromarray(image).resize((width, height), Image.Resampling.BILINEAR))


def frame_size(roles: Sequence[str], main_size: int = MAIN_SIZE, side_size: int = SIDE_SIZE) -> tuple[int, int]:
    """(height, width) of the video frame for these camera roles."""
    num_side = len(roles) - 1
    if num_side <= 0:
        return main_size, main_size
    return max(main_size, side_size * max(num_side, 2)), side_size + main_size


def compose_frame(images: Mapping[str, np.ndarray], main_size: int = MAIN_SIZE,
                  side_size: int = SIDE_SIZE) -> np.ndarray:
    """Lay the cameras out in one uint8 frame (see the module docstring).

    The large camera is ``main`` if present, else the first one; the others follow in their order.
    """
    if not images:
        raise ValueError("no camera images to lay out: make the env with at least one camera")
    roles = list(images)
    main_role = MAIN_ROLE if MAIN_ROLE in images else roles[0]
    side_roles = [role for role in roles if role != main_role]
    height, width = frame_size(roles, main_size, side_size)
    frame = np.zeros((height, width, 3), dtype=np.uint8)
    frame[:main_size, width - main_size:] = resize_image(images[main_role], (main_size, main_size))
    for slot, role in enumerate(side_roles):
        top = slot * side_size
        frame[top:top + side_size, :side_size] = resize_image(images[role], (side_size, side_size))
    return frame


@functools.lru_cache(maxsize=4)
def _font(size: int):
    _, _, ImageFont = _pil()
    return ImageFont.load_default(size=size)


def _wrap(text: str, font, max_width: float, max_lines: int) -> list[str]:
    """Greedy word wrap to ``max_width`` pixels; the last kept line ends with '...' if text was cut."""
    lines: list[str] = []
    for word in text.split():
        if lines and font.getlength(lines[-1] + " " + word) <= max_width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] += " ..."
    return lines


def draw_overlay(frame: np.ndarray, instruction: str, status: str, highlight: bool, region: tuple[int, int, int, int],
                 font_size: int = 16) -> np.ndarray:
    """Draw the instruction (top band) and a status line (bottom band) inside ``region`` = (x0, y0, x1, y1).

    ``highlight`` draws the status in green (used for success). Returns a new array.
    """
    Image, ImageDraw, _ = _pil()
    font = _font(font_size)
    x0, y0, x1, y1 = region
    pad, line_height = 6, font_size + 4
    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image, "RGBA")
    lines = _wrap(instruction, font, x1 - x0 - 2 * pad, max_lines=3)
    if lines:
        draw.rectangle((x0, y0, x1, y0 + 2 * pad + line_height * len(lines)), fill=(0, 0, 0, 150))
        for i, line in enumerate(lines):
            draw.text((x0 + pad, y0 + pad + i * line_height), line, font=font, fill=(255, 255, 255))
    draw.rectangle((x0, y1 - 2 * pad - line_height, x1, y1), fill=(0, 0, 0, 150))
    draw.text((x0 + pad, y1 - pad - line_height), status, font=font,
              fill=(80, 255, 80) if highlight else (255, 255, 255))
    return np.asarray(image)


def video_frame(images: Mapping[str, np.ndarray], instruction: str, step: int, reward: float,
                episode_return: float, success: bool, overlay: bool = True, main_size: int = MAIN_SIZE,
                side_size: int = SIDE_SIZE) -> np.ndarray:
    """One video frame: the camera layout plus (``overlay=True``) the instruction and status text."""
    frame = compose_frame(images, main_size, side_size)
    if not overlay:
        return frame
    width = frame.shape[1]
    status = f"step {step}   reward {reward:.2f}   return {episode_return:.2f}   {'SUCCESS' if success else 'no success yet'}"
    return draw_overlay(frame, instruction, status, highlight=success,
                        region=(width - main_size, 0, width, main_size))
