"""Simulator-free parts of the wrapper suite: OpenVLA helpers, the video frame layout, SB3 embeddings."""
import subprocess
import sys

import numpy as np
import pytest

from vla_gym.core.video import compose_frame, frame_size, resize_image, video_frame
from vla_gym.trainers.policies.openvla_prompts import (
    ActionTokenizer,
    normalize_actions,
    openvla_prompt,
    unnormalize_actions,
)
from vla_gym.wrappers import hash_instruction

VOCAB = 32000


# ------------------------------------------------------------------------------------------ OpenVLA
def test_prompt():
    assert openvla_prompt("Put the bowl on the plate ") == \
        "In: What action should the robot take to put the bowl on the plate?\nOut:"
    assert openvla_prompt("Open X", lowercase=False) == "In: What action should the robot take to Open X?\nOut:"


def test_tokenizer_ids_round_trip_exactly():
    tokenizer = ActionTokenizer(VOCAB)
    ids = np.arange(VOCAB - 256, VOCAB)
    assert np.array_equal(tokenizer.encode(tokenizer.decode(ids)), ids)
    assert tokenizer.first_token_id == VOCAB - 256


def test_tokenizer_bins_and_centers():
    tokenizer = ActionTokenizer(VOCAB)
    width = 2 / 256
    assert np.allclose(tokenizer.bin_centers, -1 + (np.arange(256) + 0.5) * width)
    assert tokenizer.encode([-1.0, -1.0 + width - 1e-9, -1.0 + width, 0.0, 1.0]).tolist() == \
        [VOCAB - 1, VOCAB - 1, VOCAB - 2, VOCAB - 1 - 128, VOCAB - 256]
    assert tokenizer.encode([-7.0, 7.0]).tolist() == [VOCAB - 1, VOCAB - 256]  # clipped
    # every bin's center and its two edges (inside the bin) map back to that bin
    edges = -1 + np.arange(256) * width
    assert np.array_equal(tokenizer.bins(edges), np.arange(256))
    assert np.array_equal(tokenizer.bins(tokenizer.bin_centers), np.arange(256))


def test_tokenizer_actions_round_trip_within_half_a_bin():
    tokenizer = ActionTokenizer(VOCAB)
    actions = np.random.default_rng(0).uniform(-1, 1, size=(1000, 7))
    decoded = tokenizer.decode(tokenizer.encode(actions))
    assert decoded.shape == actions.shape and decoded.dtype == np.float32
    assert np.max(np.abs(decoded - actions)) <= 1 / 256 + 1e-6
    # decoding is idempotent: centers encode to themselves
    assert np.array_equal(tokenizer.decode(tokenizer.encode(decoded)), decoded)


def test_tokenizer_rejects_non_action_ids():
    tokenizer = ActionTokenizer(VOCAB)
    with pytest.raises(ValueError, match=f"{VOCAB - 256}..{VOCAB - 1}"):
        tokenizer.decode([5, VOCAB - 1])
    with pytest.raises(ValueError):
        ActionTokenizer(100)


def test_unnormalize_from_percentiles():
    stats = {"q01": [-0.5, 0.0, -1.0], "q99": [0.5, 2.0, 1.0], "mask": [True, True, False]}
    normalized = np.array([[-1.0, -1.0, -1.0], [0.0, 0.0, 0.3], [1.0, 1.0, 1.0]])
    actions = unnormalize_actions(normalized, stats)
    assert np.allclose(actions, [[-0.5, 0.0, -1.0], [0.0, 1.0, 0.3], [0.5, 2.0, 1.0]])
    assert np.allclose(normalize_actions(actions, stats), normalized)
    with pytest.raises(ValueError, match="shape"):
        unnormalize_actions(np.zeros(7), stats)


# -------------------------------------------------------------------------------------- video layout
def _camera(value, size=224):
    return np.full((size, size, 3), value, dtype=np.uint8)


@pytest.mark.parametrize("roles, expected", [
    (("main",), (448, 448)),
    (("main", "wrist"), (448, 672)),
    (("main", "left_wrist", "right_wrist"), (448, 672)),
    (("main", "a", "b", "c"), (672, 672)),
])
def test_frame_sizes(roles, expected):
    assert frame_size(roles) == expected
    assert compose_frame({role: _camera(10 * i + 5, 64) for i, role in enumerate(roles)}).shape == (*expected, 3)


def test_two_wrist_layout_main_right_wrists_stacked_left():
    frame = compose_frame({"left_wrist": _camera(50), "main": _camera(200), "right_wrist": _camera(100)})
    assert (frame[:, 224:] == 200).all()          # main, 448x448, right
    assert (frame[:224, :224] == 50).all()        # first wrist, top left
    assert (frame[224:, :224] == 100).all()       # second wrist, bottom left


def test_one_wrist_layout_leaves_slot_below_black():
    frame = compose_frame({"main": _camera(200), "wrist": _camera(50, 128)})
    assert (frame[:224, :224] == 50).all() and (frame[224:, :224] == 0).all()


def test_overlay_draws_text_on_main_only():
    images = {"main": _camera(128), "wrist": _camera(128)}
    plain = video_frame(images, "pick up the cube", 3, 0.5, 1.0, success=True, overlay=False)
    drawn = video_frame(images, "pick up the cube", 3, 0.5, 1.0, success=True)
    changed = np.any(drawn != plain, axis=-1)
    assert changed[:, 224:].any() and not changed[:, :224].any()
    assert changed[:40].any() and changed[-30:].any()  # instruction band on top, status band at the bottom


def test_resize_image():
    image = np.random.default_rng(0).integers(0, 255, (64, 48, 3), dtype=np.uint8)
    assert resize_image(image, (64, 48)) is image
    assert resize_image(image, (32, 96)).shape == (32, 96, 3)
    assert resize_image(_camera(77, 100), (50, 50)).max() == 77


# ---------------------------------------------------------------------------------------------- misc
def test_hash_instruction_is_fixed_across_processes():
    here = hash_instruction("Put the Bowl on the plate.", 32)
    code = "from vla_gym.wrappers import hash_instruction; print(hash_instruction('put the bowl on the plate', 32).tolist())"
    there = eval(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert np.allclose(here, there) and np.isclose(np.linalg.norm(here), 1.0)
    assert not np.allclose(here, hash_instruction("open the drawer", 32))


def test_importing_wrappers_imports_no_simulator_or_torch():
    code = ("import sys, vla_gym, vla_gym.wrappers, vla_gym.vector.envs; "
            "print([m for m in ('torch', 'mani_skill', 'libero', 'robosuite', 'sapien', 'PIL', 'imageio') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
