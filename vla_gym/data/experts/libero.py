"""The scripted LIBERO expert for an env's current task: read its BDDL goal, pick the skills that reach it.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.data.experts.libero import libero_expert
    >>> env = gym.make("VLA/LiberoObject-v0", task_id=0, cameras=("main",), image_size=64)  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0, options={"init_state_id": 0})                          # doctest: +SKIP
    >>> expert = libero_expert(env)                                                          # doctest: +SKIP
    >>> done = False
    >>> while not done:                                                                      # doctest: +SKIP
    ...     obs, reward, done, truncated, info = env.unwrapped.step(expert(), observe=False)
    ...     done = done or truncated

The task's BDDL goal names what goes where (``("in", "ketchup_1", "basket_1_contain_region")``,
``("on", "akita_black_bowl_1", "plate_1")``). An ``On`` / ``In`` part gets a
:class:`~vla_gym.data.experts.libero_skills.PickPlaceExpert`, a ``Turnon`` / ``Turnoff`` part a
:class:`~vla_gym.data.experts.libero_skills.TurnKnobExpert`, and a goal with several parts a
:class:`~vla_gym.data.experts.libero_skills.SequenceExpert` over them (knobs first). Drawers and pushing have
no primitive (docs/libero.md says why). The tasks with an expert (every LIBERO-Object and LIBERO-Spatial
task, and some of LIBERO-Goal and LIBERO-90) are :data:`vla_gym.data.experts.libero_tasks.SUPPORTED`.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vla_gym.data.experts.libero_scene import Scene
from vla_gym.data.experts.libero_skills import (
    PickPlaceExpert,
    SequenceExpert,
    TurnKnobExpert,
)
from vla_gym.data.experts.libero_tasks import SUPPORTED


def _part(scene: Scene, predicate: list[str], task_name: str) -> Callable[[], object]:
    """A factory for the expert that makes one BDDL predicate true."""
    kind = predicate[0].lower()
    if kind in ("on", "in") and not task_name.startswith("push") and "_push_" not in task_name:
        _, obj, target = predicate
        return lambda: PickPlaceExpert(scene, obj, target, kind)
    if kind in ("turnon", "turnoff"):
        return lambda: TurnKnobExpert(scene, predicate[1], kind == "turnon")
    # opening / closing drawers and pushing have no primitive: see docs/libero.md
    raise KeyError(f"no scripted primitive for the BDDL predicate {predicate} of {task_name}")


def _order(goal: list[list[str]]) -> list[list[str]]:
    """The goal's parts in an order that works: knobs first, then placing (an object that another is
    placed on goes first)."""
    placed_on = {p[2] for p in goal if p[0].lower() in ("on", "in")}
    return sorted(goal, key=lambda p: 0 if p[0].lower() in ("turnon", "turnoff") else 1 if p[1] in placed_on else 2)


def libero_expert(env) -> Callable[[], np.ndarray]:
    """After ``env.reset()``: a fresh per-episode expert for the env's current LIBERO task.

    Calling it returns the next 7-D float32 action (vla_gym convention), reading the simulator's
    privileged state through ``env.unwrapped.backend``. Raises KeyError naming the supported tasks
    when the task has none.
    """
    base = env.unwrapped
    task = getattr(base, "task", None)
    if task is None:
        raise RuntimeError("call env.reset() before libero_expert(env)")
    if (task.suite, task.name) not in SUPPORTED:
        raise KeyError(
            f"no scripted LIBERO expert for {task.suite}/{task.name}; experts exist for "
            f"{sorted(SUPPORTED)}"
        )
    robosuite_env = getattr(getattr(base, "backend", None), "robosuite_env", None)
    if robosuite_env is None:
        raise TypeError(f"{env} is not a vla_gym LIBERO env (VLA/Libero*-v0)")
    return _expert_for_goal(robosuite_env, task)


def _expert_for_goal(robosuite_env, task) -> Callable[[], np.ndarray]:
    """The expert for the BDDL goal of the robosuite env's task (whether or not it is in SUPPORTED)."""
    goal = [list(predicate) for predicate in robosuite_env.parsed_problem["goal_state"]]
    scene = Scene(robosuite_env)
    parts = _order(goal)
    if len(parts) == 1:
        return _part(scene, parts[0], task.name)()
    return SequenceExpert(scene, [(predicate, _part(scene, predicate, task.name)) for predicate in parts])
