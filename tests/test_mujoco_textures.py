"""LIBERO's texture colour space (vla_gym/backends/mujoco_textures.py): MuJoCo >= 3.3.3 decodes LIBERO's textures as
sRGB and renders its scenes much darker; ``texture_colorspace="linear"`` (the default) keeps LIBERO's own frames on
every version, ``"auto"`` leaves MuJoCo's decoding (the frames of checkpoints trained on MuJoCo 3.17 before the
switch). The frames themselves are checked against the reference ones by the canary (``RENDER``, test_canary.py);
docs/evaluation.md has the measurements across versions."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import vla_gym  # noqa: F401  (registers the ids)
from vla_gym.backends.mujoco_textures import check_colorspace, effective_colorspace, has_colorspaces


@pytest.mark.quick
def test_an_unknown_colorspace_names_the_choices():
    with pytest.raises(ValueError, match=r"texture_colorspace must be one of \['linear', 'auto'\], got 'srgb'"):
        check_colorspace("srgb")
    assert effective_colorspace("linear") == "linear"
    assert effective_colorspace("auto") == ("auto" if has_colorspaces() else "linear")


def _reset_frame(**kwargs) -> tuple[gym.Env, np.ndarray]:
    env = gym.make("VLA/LiberoObject-v0", task_id=0, cameras=("main",), image_size=64, **kwargs)
    observation, _ = env.reset(seed=0, options={"init_state_id": 40})
    return env, observation["images"]["main"].astype(np.float32)


def test_the_env_renders_linear_textures_by_default_and_says_so():
    pytest.importorskip("libero.libero")
    env, linear = _reset_frame()
    try:
        assert env.unwrapped.texture_colorspace == "linear"
        with pytest.raises(ValueError, match="texture_colorspace must be one of"):
            gym.make("VLA/LiberoObject-v0", texture_colorspace="dark")
    finally:
        env.close()
    env, auto = _reset_frame(texture_colorspace="auto")
    env.close()
    if has_colorspaces():  # MuJoCo >= 3.3.3: its own decoding is much darker (about 36 of 255 on this frame)
        assert linear.mean() - auto.mean() > 20
    else:  # up to 3.3.2 textures are always linear: both settings give the same frame
        np.testing.assert_array_equal(linear, auto)
