"""Gymnasium wrappers for vla_gym envs, one per module (installed as ``vla_gym.wrappers``).

Innermost first::

    import gymnasium as gym, vla_gym
    from vla_gym.wrappers import ActionChunk, EpisodeMetrics, MultiCamera, RecordEpisodeVideo

    env = gym.make("VLA/Libero10-v0", task_id=0)
    env = ActionChunk(env, chunk_size=8)     # first: skips renders inside chunks (wrappers below see sub-steps)
    env = RecordEpisodeVideo(env, "videos")  # needs the unified obs: below MultiCamera / SB3Compat
    env = EpisodeMetrics(env)                # counts env steps through ActionChunk
    env = MultiCamera(env, layout="vla")     # {"main": [3,224,224], "wrists": [1,3,224,224]}

======================== ===========================================================================
ActionChunk              ``[K, action_dim]`` actions per step; only the last sub-step renders
ActionSubset             the policy sets some action dimensions (e.g. xyz); the others are held fixed
EpisodeMetrics           ``info["episode_metrics"]`` (env/return, env/episode_len, env/success_once, ...)
RecordEpisodeVideo       one MP4 per episode, multi-camera layout with overlay, atomic writes
RecordEpisodes           every finished episode staged as a LeRobot v3 episode table (rollouts -> datasets)
MultiCamera              choose / resize cameras, HWC or CHW, the ``vla`` main + wrist-stack layout
NormalizeRewardPerTask   rewards / the running std of the current task's discounted return (multi-task ids)
Perturb                  one seeded OOD perturbation (lighting, camera_pose, paraphrase, action_noise, ...)
SB3Compat                Box / Dict-of-Box observations for Stable-Baselines3
======================== ===========================================================================

OpenVLA's prompt and action-token helpers live with the policies
(``vla_gym.trainers.policies.openvla_prompts``). See docs/wrappers.md for the order to stack them in and the vector-env helpers.
"""
from vla_gym.wrappers.action_chunk import ActionChunk
from vla_gym.wrappers.action_subset import ActionSubset
from vla_gym.wrappers.episode_metrics import EpisodeMetrics, finished_episodes, summarize_episodes
from vla_gym.wrappers.multi_camera import MultiCamera
from vla_gym.wrappers.normalize_reward import NormalizeRewardPerTask
from vla_gym.wrappers.perturb import Perturb
from vla_gym.wrappers.record_episodes import RecordEpisodes
from vla_gym.wrappers.record_video import RecordEpisodeVideo
from vla_gym.wrappers.sb3 import SB3Compat, hash_instruction

__all__ = [
    "ActionChunk", "ActionSubset", "EpisodeMetrics", "MultiCamera", "NormalizeRewardPerTask", "Perturb", "RecordEpisodeVideo", "RecordEpisodes", "SB3Compat",
    "finished_episodes", "hash_instruction", "summarize_episodes",
]
