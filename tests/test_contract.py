"""The camera-contract preflight (issue 29, item 5): a checkpoint records the observation and action contract it was
trained on; evaluation, ``init_checkpoint`` and resume refuse an env that differs, naming the settings that fix it."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from vla_gym.core import schema
from vla_gym.trainers import PPO
from vla_gym.trainers.runtime.checkpoint import load_checkpoint
from vla_gym.trainers.runtime.contract import ContractError, check_contract, checkpoint_contract, contract_of

ROOT = pathlib.Path(__file__).resolve().parents[1]
SFT = ROOT / "experiments/libero_miniature/models/libero_object_seed0_sft_3demos_fitted.pt"
CHUNK = gym.spaces.Box(-1.0, 1.0, (8, 7), np.float32)


def libero_contract(roles=("main",), size=(128, 128), flip="vertical", action=CHUNK, textures="linear"):
    return contract_of(schema.observation_space(roles, size, 8), action, flip, textures)


@pytest.mark.quick
@pytest.mark.parametrize("env, message", [
    (libero_contract(("main",), (224, 224)), "main at 128 px (env gives 224 px): pass env.kwargs.image_size=128"),
    (libero_contract(("wrist",)), "cameras main+wrist (env lacks main): pass env.kwargs.cameras=[main,wrist]"),
    (libero_contract(flip="both"), "flip=vertical (env flips both): pass env.kwargs.flip=vertical"),
    (libero_contract(textures="auto"), "linear textures (LIBERO's frames) (env renders MuJoCo >= 3.3.3's sRGB textures "
     "(darker frames)): pass env.kwargs.texture_colorspace=linear"),
    (libero_contract(action=schema.action_space(7)),
     "actions of shape [8, 7] (env takes [7]): pass env.wrappers with {name: ActionChunk, kwargs: {chunk_size: 8}}"),
])
def test_each_mismatch_is_named_with_its_fix(env, message):
    trained = libero_contract(("main", "wrist"))
    if "main+wrist" not in message:
        trained = libero_contract()
    with pytest.raises(ContractError, match="trainers/eval.py: the checkpoint was trained on") as caught:
        check_contract(trained, env, "trainers/eval.py")
    assert message in str(caught.value)


@pytest.mark.quick
def test_an_env_may_give_more_than_the_checkpoint_reads():
    """An extra camera (for videos) or an unknown flip (a checkpoint from before contracts) passes."""
    check_contract(libero_contract(("main",)), libero_contract(("main", "wrist")), "x")
    check_contract(libero_contract(flip=None), libero_contract(flip="both"), "x")
    check_contract(libero_contract(textures=None), libero_contract(textures="auto"), "x")


@pytest.mark.quick
def test_a_render_shift_can_be_waived_but_not_a_size():
    """eval.py --allow-render-shift: a policy trained on MuJoCo 3.17's darker frames may be played on LIBERO's own
    (the difference is returned, to print and record); a camera size is never waived."""
    trained = libero_contract(textures="auto")
    with pytest.raises(ContractError, match="pass env.kwargs.texture_colorspace=auto on MuJoCo >= 3.3.3"):
        check_contract(trained, libero_contract(), "x")
    assert check_contract(trained, libero_contract(), "x", waive=("flip", "textures")) == [
        "MuJoCo >= 3.3.3's sRGB textures (darker frames) (env renders linear textures (LIBERO's frames))"]
    with pytest.raises(ContractError, match="main at 128 px"):
        check_contract(trained, libero_contract(size=(224, 224)), "x", waive=("flip", "textures"))


@pytest.mark.quick
def test_checkpoints_record_their_contract_and_init_checkpoint_checks_it(tmp_path):
    model = PPO("mlp", "CartPole-v1", num_envs=1, n_steps=16, batch_size=16, n_epochs=1)
    path = model.save(tmp_path / "cartpole.pt")
    model.close()
    assert checkpoint_contract(load_checkpoint(path)) == {"cameras": {}, "flip": None, "textures": None, "state_shape": [4],
                                                         "action_shape": [], "instruction": False}
    with pytest.raises(ContractError, match=r"ppo.init_checkpoint=.*state of shape \[4\] \(env gives \[3\]\)"):
        PPO("mlp", "Pendulum-v1", num_envs=1, n_steps=16, init_checkpoint=str(path))


def test_evaluating_a_libero_checkpoint_at_another_image_size_fails_before_the_first_step(tmp_path):
    pytest.importorskip("libero.libero")
    result = subprocess.run(
        [sys.executable, "trainers/eval.py", "--checkpoint", str(SFT), "--tasks", "0", "--init-states", "0",
         "--allow-render-shift",  # only the size may fail
         "--out", str(tmp_path), "env.kwargs.image_size=224", "env.kwargs.max_episode_steps=8"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 2
    assert "the checkpoint was trained on main at 128 px (env gives 224 px): pass env.kwargs.image_size=128" in (
        result.stderr)
    assert not (tmp_path / "eval.json").exists()
