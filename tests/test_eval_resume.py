"""A killed ``trainers/eval.py`` resumes (trainers/evaluation/episode_log.py): SIGKILL it after some episodes, run the
same command again (here on a copy of the checkpoint elsewhere, as in a fresh clone: the plan names its content), and
it plays only the rest; the report equals an uninterrupted run's, sampled (greedy too, in the ``slow`` tier: the same
mechanism without the noise). ``--repeats`` (a start played N times, sampled) is checked on the same checkpoint.

The run that is killed is a process of its own (the command as the user runs it); the runs before and after it are
``trainers.eval.main`` calls in this process: what they share with it is the log on disk, not an interpreter."""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from vla_gym.trainers import PPO

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    model = PPO("mlp", "Pendulum-v1", num_envs=1, n_steps=16, batch_size=16, n_epochs=1)
    path = model.save(tmp_path_factory.mktemp("pendulum") / "pendulum.pt")
    model.close()
    return path


def command(checkpoint: pathlib.Path, out: pathlib.Path, *extra: str) -> list[str]:
    return [sys.executable, "trainers/eval.py", "--checkpoint", str(checkpoint), "--episodes-per-task", "24",
            "--out", str(out), *extra]


def outcomes(out: pathlib.Path) -> list[tuple]:
    episodes = json.loads((out / "eval.json").read_text())["episodes"]
    return [(e["spec"]["seed"], e["length"], round(e["episode_return"], 6)) for e in episodes]


def evaluate(capsys, *argv: str) -> str:
    """``trainers/eval.py ARGV`` in this process (exit 0 asserted); what it printed."""
    from vla_gym.trainers.eval import main as eval_main

    code = eval_main(list(argv))
    printed = capsys.readouterr()
    assert code == 0, printed.err[-3000:]
    return printed.out


@pytest.mark.parametrize("mode", [pytest.param([], marks=pytest.mark.slow), ["--stochastic"]],
                         ids=["greedy", "sampled"])
def test_a_killed_evaluation_resumes_where_it_stopped(checkpoint, tmp_path, mode, capsys):
    evaluate(capsys, *command(checkpoint, tmp_path / "whole", *mode)[2:])
    assert not (tmp_path / "whole" / "partial").exists()  # the log goes once the report is written

    out = tmp_path / "killed"
    log = out / "partial" / "rank0.jsonl"
    process = subprocess.Popen(command(checkpoint, out, *mode), cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if log.is_file() and len(log.read_text().splitlines()) >= 3:
            break
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    played = len(log.read_text().splitlines())
    assert 3 <= played < 24 and not (out / "eval.json").exists(), played
    other = tmp_path / "other"  # the killed run's log under another plan (another seed): evaluated afresh
    shutil.copytree(out, other)
    assert "resuming" not in evaluate(capsys, *command(checkpoint, other, *mode, "--seed", "1")[2:])

    # resumed as in a fresh clone: the same checkpoint at another path, with another file time
    clone = tmp_path / "clone" / checkpoint.name
    clone.parent.mkdir()
    clone.write_bytes(checkpoint.read_bytes())
    os.utime(clone, ns=(0, 0))
    printed = evaluate(capsys, *command(clone, out, *mode)[2:])
    assert f"resuming: {played} of this process's 24 episodes were played" in printed
    assert outcomes(out) == outcomes(tmp_path / "whole")


def test_repeats_play_each_start_again_with_other_noise(checkpoint, tmp_path, capsys):
    """``--stochastic --repeats 3``: each start (here a seed) three times in a row, the same spec, other noise."""
    out = tmp_path / "repeats"
    evaluate(capsys, "--checkpoint", str(checkpoint), "--episodes-per-task", "2", "--stochastic", "--repeats", "3",
             "--out", str(out))
    report = json.loads((out / "eval.json").read_text())
    played = outcomes(out)
    assert [seed for seed, _, _ in played] == [0, 0, 0, 1, 1, 1] and report["settings"]["repeats"] == 3
    assert len({ret for _, _, ret in played[:3]}) == 3  # one start, three draws of the noise
    # the LIBERO study's count of GRPO groups with a signal reads such a report: two groups of three
    spec = importlib.util.spec_from_file_location("group_signal", ROOT / "experiments/libero_miniature/group_signal.py")
    group_signal = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(group_signal)
    results = tmp_path / "results_signal.json"
    for _ in range(2):  # the same evaluation recorded twice: one row
        assert group_signal.main([str(out), "--json", "--out", str(results)]) == 0
    fractions = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (fractions["groups"], fractions["group_size"]) == (2, 3)
    assert fractions["mixed"] + fractions["all_success"] + fractions["all_fail"] == 1.0
    assert json.loads(results.read_text())["rows"] == [fractions]


def test_a_plan_without_repeats_is_the_plan_logged_before_repeats_existed(checkpoint):
    """A killed evaluation logged before ``--repeats`` existed resumes: a plain plan has no new key."""
    from vla_gym.trainers.eval import parse_args, report_settings, request_from_args

    plain = request_from_args(parse_args(["--checkpoint", str(checkpoint)]))
    assert "repeats" not in report_settings(plain, world_size=1)
    repeated = request_from_args(parse_args(["--checkpoint", str(checkpoint), "--stochastic", "--repeats", "4"]))
    assert report_settings(repeated, world_size=1)["repeats"] == 4


def test_a_resumed_libero_evaluation_plays_its_episodes_bit_for_bit():
    """The committed protocol SFT model on LIBERO-Object in 2 async envs, sampled, 16-step episodes (two 8-step
    chunks): in the whole run episode 1 shares the policy's batches with episode 0, in a run resumed past episode 0
    (EpisodeRunner's ``skip``, as trainers/eval.py resumes) with episode 2. Every proprio state and action of
    episodes 1 and 2 must come out the same bits (the batch has one shape, and the feature cache encodes whole
    batches: docs/evaluation.md)."""
    import torch

    from vla_gym.trainers.rollout.episode_plan import suite_specs
    from vla_gym.trainers.rollout.episode_runner import EpisodeRunner
    from vla_gym.trainers.runtime.checkpoint import load_checkpoint, load_policy
    from vla_gym.trainers.runtime.config import config_from_dict
    from vla_gym.trainers.runtime.envs import make_envs

    state = load_checkpoint(ROOT / "experiments/libero_miniature/models/libero_object_seed0_sft_3demos_fitted.pt", map_location="cpu")
    cfg = config_from_dict(state["config"], ["env.vectorization=async"])
    policy = load_policy(state, "cpu")
    envs = make_envs(cfg.env, 2, kwargs={**cfg.eval.env_kwargs, "max_episode_steps": 16})
    try:
        specs = suite_specs(envs, episodes_per_task=3, task_ids=[0])

        def play(skip):
            steps = {}

            def record(obs, actions, log_probs, jobs):
                for row, job in enumerate(jobs):
                    if job >= 0:
                        steps.setdefault(int(job), []).append((obs["state"][row].clone(), actions[row].clone()))

            torch.manual_seed(0)  # as trainers/eval.py seeds the episodes' generators
            EpisodeRunner(envs, policy).run(specs, deterministic=False, recorder=record, skip=skip)
            return steps

        whole, resumed = play(()), play({0})
    finally:
        envs.close()
    assert sorted(resumed) == [1, 2] and len(whole[1]) == 2
    for k in (1, 2):
        assert len(whole[k]) == len(resumed[k])
        for (state_a, action_a), (state_b, action_b) in zip(whole[k], resumed[k]):
            assert torch.equal(state_a, state_b) and torch.equal(action_a, action_b), k
