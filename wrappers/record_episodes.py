"""``RecordEpisodes``: every episode a vla_gym env plays, staged on disk as a LeRobot v3 episode table, so that
evaluation or RL rollouts can become a dataset (``trainers/eval.py --record-dataset DIR``).

    env = gym.make("VLA/LiberoObject-v0", cameras=["main"], image_size=128)
    env = RecordEpisodes(env, "runs/rollouts/.staging")      # innermost: sees every env step
    env = ActionChunk(env, chunk_size=8)
    ...                                                       # play episodes
    staged_episodes("runs/rollouts/.staging")                 # [{"file", "task_id", "seed", "success", ...}]

Frame t holds the observation before action t (as ``vla-gym demos`` records): the cameras, the state and the
instruction, the action the env executed (clipped to the action space), the reward and success after it. Under
:class:`~vla_gym.wrappers.ActionChunk`, whose sub-steps skip rendering, the wrapper renders the frames the
chunk skipped (``VLAEnv.observe()``), so a recorded rollout costs a render per env step. With
``successes_only=True`` it renders them only for the episodes that succeed: it keeps what the cameras would see
at each skipped step (``VLAEnv.render_snapshot()``, a few KB on MuJoCo) and renders those frames when the episode
ends a success (``VLAEnv.images_from()``, the same pixels); a failure is staged as its marker alone. Where the
simulator keeps no snapshots the frames are rendered at once. An episode that ends (terminated or truncated) is
written as ``<directory>/ep-<pid>-<n>.parquet`` with a JSON marker beside it (task, init state, seed, success,
length), each through a temporary file and a rename; an episode cut off by a reset before it ended is dropped. :mod:`vla_gym.trainers.evaluation.rollout_dataset` lays the chosen staged
episodes out as the dataset that ``trainers/sft.py`` reads (``sft.dataset``).
"""
from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import gymnasium as gym
import numpy as np


class RecordEpisodes(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Stage every finished episode in ``directory`` (module docstring); with ``successes_only`` the failures as
    markers alone, and the skipped frames rendered only for successes. Put it directly on the VLA env."""

    def __init__(self, env: gym.Env, directory: str | os.PathLike, successes_only: bool = False):
        gym.utils.RecordConstructorArgs.__init__(self, directory=str(directory), successes_only=successes_only)
        super().__init__(env)
        if not hasattr(env.unwrapped, "observe"):
            raise TypeError(f"RecordEpisodes records vla_gym envs (VLA/... ids); got {type(env.unwrapped).__name__}")
        self.successes_only = bool(successes_only)
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.fps = float(env.metadata.get("render_fps") or 20)
        self._count = 0
        self._episode: dict[str, Any] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._episode = {"seed": seed, "task_id": info.get("task_id"), "task_name": info.get("task_name", ""),
                         "init_state_id": info.get("init_state_id"), "instruction": str(obs.get("instruction", "")),
                         "images": {role: [] for role in obs.get("images", {})}, "state": [], "action": [],
                         "reward": [], "success": [], "deferred": {}}
        self._frame(obs)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        episode = self._episode
        if episode is None:  # stepped before a reset: nothing to record
            return obs, reward, terminated, truncated, info
        episode["action"].append(np.clip(np.asarray(action, np.float32), self.action_space.low, self.action_space.high))
        episode["reward"].append(float(reward))
        episode["success"].append(bool(info.get("success", False)))
        if terminated or truncated:
            self._write(episode)
            self._episode = None
        elif info.get("observed") is False:  # a sub-step of an action chunk skipped its render
            snapshot = self.env.unwrapped.render_snapshot() if self.successes_only else None
            if snapshot is None:
                self._frame(self.env.unwrapped.observe())
            else:  # rendered when the episode ends, if it is kept
                episode["deferred"][len(episode["state"])] = snapshot
                self._frame(obs, images=False)
        else:
            self._frame(obs)
        return obs, reward, terminated, truncated, info

    def _frame(self, obs: dict[str, Any], images: bool = True) -> None:
        for role, frames in self._episode["images"].items():
            frames.append(np.array(obs["images"][role], copy=True) if images else None)
        self._episode["state"].append(np.asarray(obs["state"], np.float32).copy())

    def _render_deferred(self, episode: dict[str, Any]) -> None:
        """Render the frames kept as snapshots (the simulation's own state is left as it is)."""
        for t, snapshot in episode.pop("deferred").items():
            for role, image in self.env.unwrapped.images_from(snapshot).items():
                episode["images"][role][t] = image

    def _write(self, episode: dict[str, Any]) -> None:
        import pyarrow.parquet as pq

        from vla_gym.data.lerobot import RecordedEpisode, episode_table

        name = f"ep-{os.getpid()}-{self._count:06d}"
        self._count += 1
        succeeded = bool(np.any(episode["success"]))
        marker = {"file": None, "task_id": episode["task_id"], "task_name": episode["task_name"],
                  "init_state_id": episode["init_state_id"], "seed": episode["seed"],
                  "success": succeeded, "length": len(episode["action"]), "fps": self.fps}
        if succeeded or not self.successes_only:
            self._render_deferred(episode)
            recorded = RecordedEpisode(
                images=episode["images"], state=np.stack(episode["state"]), action=np.stack(episode["action"]),
                reward=np.asarray(episode["reward"], np.float32), success=np.asarray(episode["success"]),
                instruction=episode["instruction"], task_id=int(episode["task_id"] or 0),
                task_name=episode["task_name"], init_state_id=episode["init_state_id"], seed=episode["seed"])
            tmp = self.directory / f".{name}.parquet.tmp"
            pq.write_table(episode_table(recorded, self.fps), tmp)
            os.replace(tmp, self.directory / f"{name}.parquet")
            marker["file"] = f"{name}.parquet"
        tmp = self.directory / f".{name}.json.tmp"
        tmp.write_text(json.dumps(marker))
        os.replace(tmp, self.directory / f"{name}.json")


def staged_episodes(directory: str | os.PathLike) -> list[dict[str, Any]]:
    """The markers of the episodes staged in ``directory``, in the order they were written per process."""
    directory = pathlib.Path(directory)
    return [json.loads(path.read_text()) for path in sorted(directory.glob("ep-*.json"))]
