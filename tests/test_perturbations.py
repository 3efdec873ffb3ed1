"""Seeded perturbations (vla_gym/ood/perturbations.py, wrappers/perturb.py) on real LIBERO and ManiSkill envs.

Each perturbation must change what it names and nothing else (against the same episode unperturbed), repeat
under the same seed, differ across seeds, and leave the env as it was once detached.
"""
from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from vla_gym.ood.perturbations import CATEGORIES, PERTURBATIONS, episode_generator, make_perturbation
from vla_gym.vector.wrapper_spec import parse_wrappers
from vla_gym.wrappers import Perturb

SEED = 3
ACTION = np.array([0.6, -0.4, 0.3, 0.0, 0.0, 0.0, -1.0], dtype=np.float32)
#: what each perturbation may change: images (main / wrist), state at reset, state after a step, instruction,
#: object positions
CHANGES = {
    "lighting": {"main", "wrist"},
    "background_color": {"main", "wrist"},
    "camera_pose": {"main"},
    "image_noise": {"main", "wrist"},
    "paraphrase": {"instruction"},
    "robot_pose": {"main", "wrist", "state", "step_state"},
    "object_pose": {"main", "wrist", "objects"},
    "action_noise": {"step_state"},
    "action_delay": {"step_state"},
}
ASPECTS = ("main", "wrist", "state", "step_state", "instruction", "objects")


#: perturbations whose parameters are the strength alone (the noise is drawn per step, or there is none)
NOISE_ONLY = ("image_noise", "action_noise", "action_delay")


# --------------------------------------------------------------------------------- no simulator needed
def test_unknown_kind_and_bad_strength_name_the_fix():
    with pytest.raises(ValueError, match="did you mean lighting"):
        make_perturbation("lightning")
    with pytest.raises(ValueError, match="strength must be a number >= 0"):
        make_perturbation("action_noise", -0.1)
    with pytest.raises(ValueError, match="whole number of steps"):
        make_perturbation("action_delay", 1.5)
    assert sorted(PERTURBATIONS) == sorted(k for kinds in CATEGORIES.values() for k in kinds) == sorted(CHANGES)


def test_perturb_needs_a_vla_gym_env():
    with pytest.raises(TypeError, match="needs a vla_gym env"):
        Perturb(gym.make("CartPole-v1"), "action_noise")


def test_wrapper_spec_names_it():
    (wrapper,) = parse_wrappers([{"name": "Perturb", "kwargs": {"kind": "lighting", "strength": 0.3}}])
    assert wrapper.keywords == {"kind": "lighting", "strength": 0.3}


def test_action_delay_holds_then_replays_in_order():
    delay = make_perturbation("action_delay", 2)
    params = delay.draw(None, None, None)
    delay.start(params)
    actions = [np.full(7, k, dtype=np.float32) for k in (0.1, 0.2, 0.3)]
    out = [delay.action(a, params, None) for a in actions]
    assert np.array_equal(out[0], [0, 0, 0, 0, 0, 0, -1]) and np.array_equal(out[1], out[0])
    assert np.array_equal(out[2], actions[0])
    delay.start(params)  # a new episode forgets the queue
    assert np.array_equal(delay.action(actions[2], params, None), out[0])


def test_noise_repeats_per_seed_and_differs_across_seeds():
    image = {"images": {"main": np.full((8, 8, 3), 128, np.uint8)}}
    action = np.zeros(7, np.float32)
    for kind, apply in [("image_noise", lambda p, params, rng: p.observation(image, params, rng, True)["images"]["main"]),
                        ("action_noise", lambda p, params, rng: p.action(action, params, rng))]:
        perturbation = make_perturbation(kind)
        draws = []
        for seed in (3, 3, 4):
            rng = episode_generator(seed, kind)
            params = perturbation.draw(rng, None, None)
            perturbation.start(params)
            draws.append(apply(perturbation, params, rng))
        assert np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[0], draws[2]), kind


def test_paraphrase_uses_held_out_templates():
    para = make_perturbation("paraphrase")
    episode = SimpleNamespace(instruction="Pick up the milk and place it in the basket")
    texts = {para.draw(np.random.default_rng(seed), episode, None)["instruction"] for seed in range(40)}
    assert len(texts) > 3 and all("pick up the milk and place it in the basket" in t for t in texts)
    assert make_perturbation("paraphrase", 0).draw(np.random.default_rng(0), episode, None)["instruction"] == \
        episode.instruction


# ------------------------------------------------------------------------------------ real simulators
def _objects(env) -> np.ndarray:
    """Positions of the scene's movable objects (privileged, for the checks only)."""
    backend = env.unwrapped.backend
    if hasattr(backend, "maniskill_env"):
        scene = backend.maniskill_env.scene
        return np.concatenate([scene.actors[name].pose.raw_pose[0, :3].numpy()
                               for name in backend.scene_controls().movable_objects()])
    robosuite = backend.robosuite_env
    return np.concatenate([robosuite.sim.data.body_xpos[robosuite.obj_body_id[name]]
                           for name in robosuite.objects_dict])


def _episode(env, seed=SEED):
    obs, info = env.reset(seed=seed)
    objects = _objects(env)
    step_obs = env.step(ACTION.copy())[0]
    return {"main": obs["images"]["main"].copy(), "wrist": obs["images"]["wrist"].copy(), "state": obs["state"].copy(),
            "step_state": step_obs["state"].copy(), "instruction": obs["instruction"], "objects": objects}, info


def _differs(a: dict, b: dict, aspect: str) -> bool:
    if aspect == "instruction":
        return a[aspect] != b[aspect]
    if aspect in ("main", "wrist"):
        return np.abs(a[aspect].astype(int) - b[aspect].astype(int)).mean() > 0.05
    # after a step: MuJoCo's contact solver couples the bodies, so moved objects shift the arm's step by < 1e-3
    return not np.allclose(a[aspect], b[aspect], atol=1e-3 if aspect == "step_state" else 1e-5)


SIMULATORS = {
    "maniskill": ("VLA/ManiSkill-PushCube-v0", {}),
    "libero": ("VLA/LiberoObject-v0", {"task_id": 0}),
}


def _simulator(name: str):
    env_id, kwargs = SIMULATORS[name]
    env = gym.make(env_id, cameras=("main", "wrist"), image_size=64, **kwargs)
    reference, _ = _episode(env)
    again, _ = _episode(env)
    assert not any(_differs(reference, again, aspect) for aspect in ASPECTS)  # the episode repeats unperturbed
    return SimpleNamespace(name=name, env=env, reference=reference)


@pytest.fixture(scope="module")
def maniskill_sim():
    sim = _simulator("maniskill")
    yield sim
    sim.env.close()


@pytest.fixture(scope="module")
def libero_sim():
    sim = _simulator("libero")
    yield sim
    sim.env.close()


@pytest.fixture(params=sorted(SIMULATORS))
def sim(request):
    """Each simulator's env (one per module, both kept: each test of either picks its own)."""
    return request.getfixturevalue(f"{request.param}_sim")


#: perturbations of the wrapper alone (the images, the instruction or the action it hands on), the same code on every
#: simulator: on ManiSkill's in the default run, on LIBERO's too in the slow tier; the scene ones run on both
WRAPPER_ONLY = ("image_noise", "paraphrase", "action_noise", "action_delay")


@pytest.mark.parametrize("name, kind", [
    pytest.param(name, kind, id=f"{name}-{kind}",
                 marks=[pytest.mark.slow] if kind in WRAPPER_ONLY and name != "maniskill" else [])
    for name in sorted(SIMULATORS) for kind in CHANGES])
def test_changes_what_it_names_only_and_repeats_per_seed(request, name, kind):
    sim = request.getfixturevalue(f"{name}_sim")
    env = Perturb(sim.env, kind)
    try:
        first, info = _episode(env)
        params = info["perturbation"][kind]
        changed = {aspect for aspect in ASPECTS if _differs(first, sim.reference, aspect)}
        must = {"main"} if kind in ("lighting", "background_color", "camera_pose", "image_noise") else \
            {"instruction"} if kind == "paraphrase" else {"state"} if kind == "robot_pose" else \
            {"objects"} if kind == "object_pose" else {"step_state"}
        assert must <= changed <= CHANGES[kind], f"{kind} on {sim.name} changed {sorted(changed)} " \
            f"(state after a step by {np.abs(first['step_state'] - sim.reference['step_state']).max():.2e})"

        again, info_again = _episode(env)
        assert info_again["perturbation"][kind] == params
        assert not any(_differs(first, again, aspect) for aspect in ASPECTS if aspect != "step_state" or
                       kind not in ("image_noise",))
        other = _episode(env, seed=SEED + 1)[1]["perturbation"][kind]
        if kind not in NOISE_ONLY:  # these draw their noise per step (test_noise_differs_across_seeds)
            assert other != params
    finally:
        env.detach()
    restored, _ = _episode(sim.env)
    assert not any(_differs(restored, sim.reference, aspect) for aspect in ASPECTS), f"{kind} left the scene changed"


def test_stacked_perturbations_are_independent(sim):
    lighting = Perturb(sim.env, "lighting")
    both = Perturb(lighting, "action_noise", strength=0.2)
    try:
        _, info = both.reset(seed=SEED)
        assert set(info["perturbation"]) == {"lighting", "action_noise"}
        solo = Perturb(sim.env, "lighting")
        assert solo.reset(seed=SEED)[1]["perturbation"]["lighting"] == info["perturbation"]["lighting"]
        solo.detach()
        assert both.step(ACTION.copy())[4]["perturbation"]["action_noise"] == {"strength": 0.2, "std": 0.2}
    finally:
        both.detach()
        lighting.detach()
