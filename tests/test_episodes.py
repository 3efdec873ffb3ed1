"""The episode contract (vla_gym.core.episodes): the same episodes out of every layout a step can come in.

Simulator-free: gymnasium's own Sync vector env over a small scripted env whose episodes are known in advance
(length, return, success step, task, action-chunk sub-steps). The wrappers and trainers that use the module
are tested on real simulators in test_wrappers_*.py and test_trainers_*.py.
"""
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from vla_gym.core.episodes import Episode, EpisodeCounter, episode_sums, finished_episodes, masked, summarize
from vla_gym.wrappers import EpisodeMetrics

CHUNK = 2  # env steps per step, reported as info["chunk_steps"] like ActionChunk does


class Scripted(gym.Env):
    """Episode k of sub-env e lasts 2 + (e + k) % 3 steps, reward 0.5 per step, success on its 2nd step when
    ``e + k`` is even (then terminated at the end, else truncated), task ``t{e + k}``."""

    observation_space = spaces.Box(0, 100, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, index: int, report_success: bool = True):
        self.index, self.report_success, self.k = index, report_success, -1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k, self.t = self.k + 1, 0
        return np.zeros(1, np.float32), {"task_name": "reset info"}

    def step(self, action):
        self.t += 1
        n = self.index + self.k
        end = self.t == 2 + n % 3
        info = {"chunk_steps": CHUNK, "task_id": n, "task_name": f"t{n}"}
        if self.report_success:
            info["success"] = self.t == 2 and n % 2 == 0
        return np.full(1, self.t, np.float32), 0.5, end and n % 2 == 0, end and n % 2 == 1, info


def expected_episodes(index: int, count: int, report_success: bool = True) -> list[Episode]:
    out = []
    for k in range(count):
        n = index + k
        steps = 2 + n % 3
        out.append(Episode(0.5 * steps, CHUNK * steps, (n % 2 == 0) if report_success else None, n, f"t{n}", index))
    return out


def run_vector(mode: AutoresetMode, vector_steps: int, report_success: bool = True, wrap=lambda env: env):
    envs = SyncVectorEnv([lambda i=i: wrap(Scripted(i, report_success)) for i in range(3)], autoreset_mode=mode)
    counter = EpisodeCounter(3, mode)
    envs.reset(seed=0)
    found, from_wrapper = [], []
    for _ in range(vector_steps):
        _, rewards, terminated, truncated, infos = envs.step(np.zeros(3, dtype=np.int64))
        found += counter.step(rewards, terminated, truncated, infos)
        from_wrapper += finished_episodes(infos)
    envs.close()
    return found, from_wrapper


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_counter_gives_the_scripted_episodes_in_both_autoreset_modes(mode):
    found, _ = run_vector(mode, 14)
    for index in range(3):
        mine = [episode for episode in found if episode.env_index == index]
        assert len(mine) >= 3 and mine == expected_episodes(index, len(mine))


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_episode_metrics_wrapper_and_counter_agree(mode):
    found, from_wrapper = run_vector(mode, 14, wrap=EpisodeMetrics)
    assert len(found) == len(from_wrapper) > 6
    assert sorted(found, key=str) == sorted((Episode.from_metrics(m) for m in from_wrapper), key=str)


def test_envs_without_success_report_none_and_leave_success_means_alone():
    found, _ = run_vector(AutoresetMode.SAME_STEP, 6, report_success=False)
    assert found and all(episode.success is None for episode in found)
    assert "env/success_once" not in found[0].metrics()
    summary = summarize(found)
    assert "env/success_once" not in summary and summary["env/episodes"] == len(found)
    _, counts = episode_sums(found)
    assert counts["env/success_once"] == 0 and counts["env/return"] == len(found)


def test_running_figures_hold_the_totals_right_after_an_episode_ends():
    counter = EpisodeCounter(1)
    env = Scripted(0)                                   # first episode: 2 steps, success on step 2
    env.reset()
    for _ in range(2):
        _, reward, terminated, truncated, info = env.step(0)
        episodes = counter.step(reward, terminated, truncated, info)   # a single env's unbatched info
    assert episodes == expected_episodes(0, 1)
    assert (counter.returns[0], counter.lengths[0], counter.success[0]) == (1.0, 4, True)
    env.reset()
    counter.step(*env.step(0)[1:4], {"chunk_steps": 1})
    assert (counter.returns[0], counter.lengths[0], counter.success[0]) == (0.5, 1, False)


def test_summary_overall_and_per_task():
    episodes = [Episode(1.0, 10, True, 0, "a"), Episode(0.0, 30, False, 0, "a"), Episode(2.0, 20, True, 1, "b"),
                Episode(4.0, 40, None, 2, "c")]
    summary = summarize(episodes)
    assert summary["env/return"] == pytest.approx(7 / 4) and summary["env/episode_len"] == 25
    assert summary["env/success_once"] == pytest.approx(2 / 3) and summary["env/episodes"] == 4
    assert summary["env/reward"] == pytest.approx((0.1 + 0.0 + 0.1 + 0.1) / 4)
    assert (summary["env/success_once/a"], summary["env/success_once/b"]) == (0.5, 1.0)
    assert "env/success_once/c" not in summary      # task c never reported success
    assert summarize([episode.metrics() for episode in episodes]) == summary   # info["episode_metrics"] dicts
    sums, counts = episode_sums(episodes, tasks=["a", "z"])  # the keys every rank agrees on
    assert set(counts) == {"env/return", "env/episode_len", "env/success_once", "env/reward",
                           "env/success_once/a", "env/success_once/z"}
    assert counts["env/success_once/z"] == 0 and sums["env/success_once/a"] == 1.0
    assert summarize([]) == {}


def test_batched_torch_infos_of_a_gpu_env():
    torch = pytest.importorskip("torch")
    counter = EpisodeCounter(2)
    done = torch.tensor([False, True])
    info = {"success": torch.tensor([False, True]), "elapsed_steps": torch.tensor([3, 3])}
    infos = dict(info, final_info=dict(info), _final_info=done)   # the batched ManiSkill env's layout: no masks
    episodes = counter.step(torch.tensor([0.0, 1.0]), done, torch.tensor([False, False]), infos)
    assert episodes == [Episode(1.0, 1, True, None, "", 1)]
    assert masked(infos, "success", 1) is True and masked({"success": True}, "success", 0) is True


def test_clear_errors():
    with pytest.raises(ValueError, match=r"num_envs=2.*shape \(3,\)"):
        EpisodeCounter(2).step(np.zeros(3), np.zeros(3, bool), np.zeros(3, bool), {})
    with pytest.raises(TypeError, match="Episode or an info"):
        summarize([1.0])


def test_episode_record_round_trips_through_its_metrics():
    episode = Episode(1.5, 6, True, 3, "PushCube", 2)
    assert Episode.from_metrics(dict(episode.metrics(), env_index=2)) == episode
    assert Episode.from_metrics(Episode(0.0, 1).metrics()) == Episode(0.0, 1)   # task_id -1 <-> None


def test_importing_the_module_imports_no_torch():
    code = "import sys, vla_gym.core.episodes; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
