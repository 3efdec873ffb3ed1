"""vla_gym's numpy arm controller against ManiSkill's own ``PDEEPoseController`` (the real simulator, CPU).

Lockstep: on the same simulator states both controllers turn the same actions (clipped ones included) into
joint targets that agree to float32 rounding; an episode of random actions stays within 1e-3 of raw ManiSkill's
state and succeeds on the same steps. Every other control mode keeps ManiSkill's own ``set_action``.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("mani_skill", reason='ManiSkill3 is not installed: pip install -e ".[maniskill]"')

from vla_gym.backends.maniskill.env import import_maniskill  # noqa: E402
from vla_gym.backends.maniskill.fast_controller import install_fast_ee_controller  # noqa: E402


def raw_env(task: str = "PushCube-v1", control_mode: str = "pd_ee_delta_pose", **kwargs):
    import_maniskill()
    return gym.make(task, robot_uids="panda_wristcam", control_mode=control_mode, obs_mode="state", **kwargs)


def test_joint_targets_match_maniskills_controller_on_the_same_states():
    import torch

    env = raw_env()
    env.reset(seed=0)
    arm = env.unwrapped.agent.controller.controllers["arm"]
    maniskill_set_action = arm.set_action
    assert install_fast_ee_controller(env) and arm.set_action != maniskill_set_action
    rng = np.random.default_rng(0)
    worst = 0.0
    for step in range(150):
        action = torch.as_tensor(rng.uniform(-1.5, 1.5, size=(1, 6)).astype(np.float32))  # some beyond the clip
        maniskill_set_action(action.clone())
        expected = arm._target_qpos.clone()
        arm.set_action(action.clone())
        assert arm._target_qpos.shape == expected.shape and arm._target_qpos.dtype == expected.dtype
        worst = max(worst, float((arm._target_qpos - expected).abs().max()))
        env.step(rng.uniform(-1, 1, 7).astype(np.float32))  # move on to a new state
        if step % 50 == 49:
            env.reset(seed=step)
    env.close()
    assert worst < 1e-5, worst  # radians: float32 rounding of the pose algebra (measured 6e-7)


@pytest.mark.parametrize("task", ["PushCube-v1", "PickCube-v1"])
def test_episodes_stay_within_rounding_of_raw_maniskill(task):
    ours, raw = raw_env(task), raw_env(task)
    assert install_fast_ee_controller(ours)
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        ours_obs, _ = ours.reset(seed=seed)
        raw_obs, _ = raw.reset(seed=seed)
        np.testing.assert_array_equal(ours_obs.numpy(), raw_obs.numpy())
        for _ in range(50):
            action = rng.uniform(-1, 1, 7).astype(np.float32)
            ours_obs, ours_reward, _, _, ours_info = ours.step(action)
            raw_obs, raw_reward, _, _, raw_info = raw.step(action)
            np.testing.assert_allclose(ours_obs.numpy(), raw_obs.numpy(), atol=1e-3)  # measured <= 1e-4
            assert bool(ours_info["success"]) == bool(raw_info["success"])
            assert float(ours_reward) == pytest.approx(float(raw_reward), abs=1e-3)
    ours.close()
    raw.close()


@pytest.mark.parametrize("control_mode", ["pd_joint_delta_pos", "pd_ee_delta_pos", "pd_ee_target_delta_pose"])
def test_other_control_modes_keep_maniskills_controller(control_mode):
    env = raw_env(control_mode=control_mode)
    arm = env.unwrapped.agent.controller.controllers["arm"]
    assert not install_fast_ee_controller(env)
    assert "set_action" not in vars(arm)  # the class's own method
    env.close()


def test_vla_gym_envs_get_it_only_where_it_applies():
    import vla_gym  # noqa: F401  (registers the ids)

    env = gym.make("VLA/ManiSkill-PushCube-v0", obs_mode="state")
    assert "set_action" in vars(env.unwrapped.backend.maniskill_env.agent.controller.controllers["arm"])
    env.close()
    env = gym.make("VLA/ManiSkill-PushCube-v0", obs_mode="state", control_mode="pd_joint_delta_pos")
    assert "set_action" not in vars(env.unwrapped.backend.maniskill_env.agent.controller.controllers["arm"])
    env.close()
