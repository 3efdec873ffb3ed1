"""``RecordEpisodeVideo``: one MP4 per episode (or every N episodes) from the observations' own images.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.wrappers import RecordEpisodeVideo
    >>> env = RecordEpisodeVideo(gym.make("VLA/Libero10-v0", task_id=0), "videos", every_n_episodes=10)  # doctest: +SKIP

Frames are built from ``obs["images"]`` as the env returns them, so nothing is rendered twice: one
frame after reset and one per step (per chunk above :class:`~vla_gym.wrappers.ActionChunk`, whose
``render_fps`` is divided by K so the video plays in real time). The frame layout and overlay
(instruction, step, reward, return, success; return and success counted by
:class:`vla_gym.core.episodes.EpisodeCounter`) are described in :mod:`vla_gym.core.video`: main camera
448x448 on the right, other cameras 224x224 stacked on the left, 448x672 for one or two wrists.

Files are ``{video_folder}/{name_prefix}[-env{env_index}]-{episode:05d}.mp4``, episodes counted from 0
per env. Each is streamed to a hidden temporary file in the same folder and renamed into place with
``os.replace`` when the episode ends, so a killed run never leaves a broken file under a final name
(only a ``.*.partial.mp4`` file). ``info["video_path"]`` names the file at the step that finished it.
An episode cut short by ``reset()`` or ``close()`` is saved as far as it went.

Put it below wrappers that change the observation (MultiCamera, SB3Compat): it needs the unified
``{"images": {role: uint8 HxWx3}, ...}`` observation. In a vector env, apply it inside each sub-env:
``vla_gym.make_vec(id, n, wrappers=[functools.partial(RecordEpisodeVideo, video_folder="videos")])``
passes each sub-env's ``env_index`` so the file names do not collide.
"""
from __future__ import annotations

import os

import gymnasium as gym

from vla_gym.core.episodes import EpisodeCounter
from vla_gym.core.video import MAIN_SIZE, SIDE_SIZE, video_frame


class RecordEpisodeVideo(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Write an MP4 of every ``every_n_episodes``-th episode to ``video_folder`` (module docstring)."""

    def __init__(self, env: gym.Env, video_folder: str, every_n_episodes: int = 1, fps: float | None = None,
                 name_prefix: str = "episode", env_index: int | None = None, overlay: bool = True,
                 main_size: int = MAIN_SIZE, side_size: int = SIDE_SIZE):
        gym.utils.RecordConstructorArgs.__init__(self, video_folder=video_folder, every_n_episodes=every_n_episodes, fps=fps, name_prefix=name_prefix,
            env_index=env_index, overlay=overlay, main_size=main_size, side_size=side_size)
        super().__init__(env)
        images_space = getattr(env.observation_space, "spaces", {}).get("images")
        if images_space is None or not getattr(images_space, "spaces", None):
            raise ValueError(
                "RecordEpisodeVideo needs camera images in obs['images']: make the env with cameras "
                "(not a state-only mode) and apply observation-changing wrappers (MultiCamera, SB3Compat) "
                "on top of RecordEpisodeVideo"
            )
        if every_n_episodes < 1:
            raise ValueError(f"every_n_episodes must be >= 1, got {every_n_episodes}")
        self.video_folder = os.path.abspath(video_folder)
        os.makedirs(self.video_folder, exist_ok=True)
        self.every_n_episodes = every_n_episodes
        self.fps = fps or env.metadata.get("render_fps", 20)
        self.name_prefix = name_prefix if env_index is None else f"{name_prefix}-env{env_index}"
        self.overlay, self.main_size, self.side_size = overlay, main_size, side_size
        self.episode_index = -1
        self.last_video_path: str | None = None
        self._writer = None
        self._temp_path = self._final_path = None
        self.counter = EpisodeCounter(num_envs=1)  # the overlay's running return and success

    # ------------------------------------------------------------------------------------- gym API
    def reset(self, **kwargs):
        self._finish()
        obs, info = self.env.reset(**kwargs)
        self.episode_index += 1
        self.counter.restart()
        if self.episode_index % self.every_n_episodes == 0:
            self._start()
            self._add_frame(obs, step=0, reward=0.0)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.counter.step(reward, terminated, truncated, info)
        if self._writer is not None:
            self._add_frame(obs, step=info.get("elapsed_steps", -1), reward=float(reward))
            if terminated or truncated:
                info["video_path"] = self._finish()
        return obs, reward, terminated, truncated, info

    def close(self):
        self._finish()
        super().close()

    # ------------------------------------------------------------------------------------ recording
    def _start(self) -> None:
        import imageio.v2 as imageio

        name = f"{self.name_prefix}-{self.episode_index:05d}.mp4"
        self._final_path = os.path.join(self.video_folder, name)
        self._temp_path = os.path.join(self.video_folder, f".{name}.{os.getpid()}.partial.mp4")
        self._writer = imageio.get_writer(self._temp_path, fps=self.fps, codec="libx264", quality=7,
                                          macro_block_size=16, ffmpeg_log_level="error")

    def _add_frame(self, obs, step: int, reward: float) -> None:
        frame = video_frame(obs["images"], instruction=str(obs.get("instruction", "")), step=step, reward=reward,
                            episode_return=float(self.counter.returns[0]), success=bool(self.counter.success[0]),
                            overlay=self.overlay,
                            main_size=self.main_size, side_size=self.side_size)
        self._writer.append_data(frame)

    def _finish(self) -> str | None:
        """Close the running recording and move it to its final name; return that path."""
        if self._writer is None:
            return None
        writer, self._writer = self._writer, None
        try:
            writer.close()
            os.replace(self._temp_path, self._final_path)
        except BaseException:
            if os.path.exists(self._temp_path):
                os.remove(self._temp_path)
            raise
        self.last_video_path = self._final_path
        return self._final_path
