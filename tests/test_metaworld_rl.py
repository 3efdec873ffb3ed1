"""Meta-World MT10 demos -> SFT -> RL (docs/metaworld.md, "Demos -> SFT -> RL on MT10"): the env options it needs
(``task_one_hot``, ``fixed_goals``, ``init_states``), the chain in short form on the real Meta-World, state only
(``vla-gym demos`` -> trainers/sft.py -> one PPO update from the SFT checkpoint -> experiments/metaworld_mt10/
table.py's evaluations and rows; the long form, ``slow``, adds one GRPO update from the SFT and the exported models
measured again), the configs agreeing with each other, and the study README's table equal to its results.json.

The configs' own short forms (one update from scratch, two SFT steps) are tests/test_examples.py's and
tests/test_sft.py's.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "configs"
MT10 = "VLA/MetaWorldMT10-v0"
STATE = {"obs_mode": "state", "task_one_hot": True, "fixed_goals": 50}


def config(name: str) -> dict:
    return yaml.safe_load((CONFIGS / f"metaworld_mt10_{name}.yaml").read_text())


@pytest.fixture(scope="module")
def mw():
    pytest.importorskip("metaworld", reason="Meta-World is not installed (docs/metaworld.md)")
    import gymnasium as gym

    import vla_gym  # noqa: F401  (registers the ids)

    return gym


def run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    from short_runs import child_env

    result = subprocess.run([str(a) for a in argv], cwd=ROOT, env=child_env(), capture_output=True, text=True,
                            timeout=timeout, check=False)
    assert result.returncode == 0, f"{argv}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


# ------------------------------------------------------------------------------------------ units
@pytest.mark.quick
def test_bad_options_name_the_fix():
    from vla_gym.backends.metaworld.env import check_options

    assert check_options(None, "state", "corner4", task_one_hot=True, fixed_goals=50, init_states="0-39") == ()
    with pytest.raises(ValueError, match="needs obs_mode='state'"):
        check_options(None, "images", "corner4", task_one_hot=True)
    for bad in (0, -3, 2.5, True, "50"):
        with pytest.raises(ValueError, match="fixed_goals must be a positive number"):
            check_options(None, "state", "corner4", fixed_goals=bad)
    with pytest.raises(ValueError, match="add fixed_goals=N"):
        check_options(None, "state", "corner4", init_states="0-39")


@pytest.mark.quick
def test_configs_share_the_env_and_the_actor_and_keep_goals_40_49_out_of_training():
    sft, ppo, grpo = config("sft"), config("ppo"), config("grpo")
    assert sft["env"]["kwargs"] == STATE and grpo["env"]["kwargs"] == STATE
    assert ppo["env"]["kwargs"] == {**STATE, "init_states": "0-39"} and grpo["grpo"]["train_init_states"] == 40
    actor = {k: v for k, v in sft["policy"]["kwargs"].items() if k != "critic"}
    for rl in (ppo, grpo):
        assert rl["env"]["id"] == sft["env"]["id"] == MT10 and rl["policy"]["name"] == sft["policy"]["name"] == "mlp"
        assert {k: v for k, v in rl["policy"]["kwargs"].items() if k != "critic"} == actor
    assert ppo["policy"]["kwargs"].get("critic", True) and grpo["policy"]["kwargs"]["critic"] is False


TABLE = "experiments/metaworld_mt10/table.py"


def table_script():
    """experiments/metaworld_mt10/table.py as a module (a study script: not on the import path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("metaworld_mt10_table", ROOT / TABLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.quick
def test_table_script_goal_ranges():
    goal_range = table_script().goal_range
    assert goal_range("40-49") == list(range(40, 50)) and goal_range("0") == [0]
    with pytest.raises(SystemExit, match="one contiguous range"):
        goal_range("0,2")


# ------------------------------------------------------------------------------------ the env
def test_one_hot_tells_the_tasks_apart_and_keeps_metaworlds_39_numbers(mw):
    env, plain = mw.make(MT10, obs_mode="state", task_one_hot=True), mw.make(MT10, obs_mode="state")
    assert env.observation_space["state"].shape == (49,) and plain.observation_space["state"].shape == (39,)
    try:
        for task in range(10):
            obs, info = env.reset(seed=task, options={"task_id": task})
            raw, _ = plain.reset(seed=task, options={"task_id": task})
            assert np.array_equal(obs["state"][:39], raw["state"]) and info["task_id"] == task
            assert obs["state"][39:].tolist() == np.eye(10)[task].tolist()
            obs, *_ = env.step(np.zeros(4, np.float32))
            raw, *_ = plain.step(np.zeros(4, np.float32))
            assert np.array_equal(obs["state"][:39], raw["state"]) and obs["state"][39 + task] == 1.0
        single = mw.make("VLA/MetaWorld-drawer-close-v0", obs_mode="state", task_one_hot=True)
        assert single.reset(seed=0)[0]["state"][39:].tolist() == [1.0]
        single.close()
    finally:
        env.close()
        plain.close()


def test_fixed_goals_are_metaworlds_seeded_draws_and_init_states_keep_resets_in_the_pool(mw):
    env = mw.make(MT10, obs_mode="state", fixed_goals=50, init_states="0-39")
    plain = mw.make(MT10, obs_mode="state")
    try:
        # init state i = Meta-World's draw from seed i; a seed picks its init state from the pool (seed % 40)
        for options, seed, goal in (({"task_id": 1, "init_state_id": 45}, None, 45), ({"task_id": 1}, 7, 7),
                                    ({"task_id": 1}, 47, 7), ({"task_id": 4}, 3, 3)):
            obs, info = env.reset(seed=seed, options=options)
            raw, _ = plain.reset(seed=goal, options={"task_id": options["task_id"]})
            assert info["init_state_id"] == goal and np.array_equal(obs["state"], raw["state"])
        drawn = {env.reset()[1]["init_state_id"] for _ in range(60)}  # unpinned (autoreset) resets: training goals
        assert drawn <= set(range(40)) and len(drawn) > 20
        assert env.unwrapped.tasks[0].num_init_states == 50
    finally:
        env.close()
        plain.close()
    with pytest.raises(ValueError, match="add fixed_goals=N"):
        mw.make(MT10, obs_mode="state", init_states="0-39")


# ----------------------------------------------------------------------------------- the chain
def table_here(*argv) -> int:
    """experiments/metaworld_mt10/table.py in this process (its evaluations are still trainers/eval.py processes)."""
    return table_script().main([str(a) for a in argv])


def train_here(script: str, *argv) -> None:
    """``python trainers/<script>.py ARGV`` in this process (the configs' own short forms, a process each, are
    tests/test_examples.py's and tests/test_sft.py's)."""
    import importlib

    assert importlib.import_module(f"vla_gym.trainers.{script}").main([str(a) for a in argv]) == 0


def chain(tmp_path, capsys, long_form: bool) -> None:
    """vla-gym demos -> SFT -> one PPO update from it (both trainers called in this process) -> both evaluated
    greedily on training and held-out goals by experiments/metaworld_mt10/table.py, whose rows and table are checked; a second ``measure`` keeps the finished
    reports, a third takes the RL budget from the rows (no ``--rl-run``). The long form also runs one GRPO update
    from the SFT, evaluates in the sampled mode too and measures the exported models again (8 more evaluations)."""
    pytest.importorskip("pyarrow")
    import torch

    demos = tmp_path / "demos"
    kwargs = [item for key, value in STATE.items() for item in ("--env-kwarg", f"{key}={str(value).lower()}")]
    run("vla-gym", "demos", MT10, "--episodes-per-task", "1", *kwargs, "--no-progress", "--out", demos)
    summary = json.loads((demos / "meta" / "vla_gym_demos.json").read_text())
    assert summary["attempts"] == 10 and summary["solved"] >= 9  # Meta-World's experts, goal 0 of each task

    common = ["device=cpu", "torch_threads=1", "logging.progress_bar=false", "checkpoint.resume=null"]
    train_here("sft", "--config", CONFIGS / "metaworld_mt10_sft.yaml", f"run_dir={tmp_path}", f"sft.dataset={demos}",
               "sft.max_steps=20", *common)
    sft = tmp_path / "sft" / "final.pt"
    state = torch.load(sft, weights_only=False)
    assert state["observation_space"]["state"].shape == (49,) and state["action_space"].shape == (4,)

    short_env = ["env.num_envs=2", "env.kwargs.max_episode_steps=20"]
    train_here("ppo", "--config", CONFIGS / "metaworld_mt10_ppo.yaml", f"run_dir={tmp_path}",
               f"ppo.init_checkpoint={sft}", "total_timesteps=1", "ppo.n_steps=16", "ppo.batch_size=16",
               "ppo.n_epochs=1", "ppo.critic_warmup_updates=0", *short_env, *common)
    (ckpt,) = sorted((tmp_path / "ppo" / "checkpoints").glob("ckpt_*.pt"))
    ppo = torch.load(ckpt, weights_only=False)
    assert ckpt.name == "ckpt_00000001.pt" and ppo["counters"]["num_timesteps"] == 32
    moved = [name for name, value in ppo["policy"].items()
             if name.startswith(("pi_net", "action_head.mean")) and not torch.equal(value, state["policy"][name])]
    assert moved, "the PPO update left the SFT actor unchanged"
    if long_form:  # the GRPO config's one update from scratch is tests/test_examples.py's
        train_here("grpo", "--config", CONFIGS / "metaworld_mt10_grpo.yaml", f"run_dir={tmp_path}",
                   f"grpo.init_checkpoint={sft}", "total_timesteps=1", "grpo.group_size=2", "grpo.groups_per_update=1",
                   "grpo.batch_size=16", "grpo.n_epochs=1", *short_env, *common)
        assert (tmp_path / "grpo" / "checkpoints" / "ckpt_00000001.pt").exists()

    out = tmp_path / "metaworld_rl.json"
    modes = ["greedy", "sampled"] if long_form else ["greedy"]  # sampled: the same rows with --stochastic evaluations
    goals = ["--train-goals", "0-1", "--heldout-goals", "40", "--evals", tmp_path / "evals", "--env-kwarg",
             "max_episode_steps=20"]
    result = run(sys.executable, TABLE, "measure", "--seed", "0", "--method", "ppo", "--sft-checkpoint", sft,
                 "--rl-run", tmp_path / "ppo", *goals, "--modes", *modes, "--export-dir", tmp_path / "models",
                 "--out", out, timeout=600)  # the study's command, as a user types it
    rows = json.loads(out.read_text())["rows"]
    assert [(r["split"], r["mode"]) for r in rows] == [(split, mode) for split in ("heldout", "train") for mode in modes]
    for row in rows:
        played_goals = [40] if row["split"] == "heldout" else [0, 1]
        assert (row["suite"], row["seed"], row["method"], row["init_states"]) == ("mt10", 0, "ppo", played_goals)
        assert row["episodes"] == 10 * len(played_goals) and 0 <= row["sft"] <= 1 and 0 <= row["rl"] <= 1
        assert row["env_steps"] == 32 and row["wall_minutes"] >= 0 and row["commit"]
        assert pathlib.Path(row["rl_checkpoint"]).name == "metaworld_mt10_seed0_ppo.pt"
    played = json.loads((tmp_path / "evals" / "ppo_s0_heldout_greedy" / "eval.json").read_text())["episodes"]
    assert sorted({e["spec"]["init_state_id"] for e in played}) == [40]  # held out, though PPO's pool is 0-39
    assert "| mt10 | 0 | ppo | heldout | greedy | 10 |" in result.stdout
    capsys.readouterr()
    assert table_here("table", "--out", out) == 0
    assert capsys.readouterr().out.count("| mt10 | 0 | ppo |") == 2 * len(modes)
    # a rerun keeps the finished reports (resume) and replaces the rows
    assert table_here("measure", "--seed", "0", "--method", "ppo", "--sft-checkpoint", sft, "--rl-run",
                      tmp_path / "ppo", *goals, "--modes", *modes, "--out", out) == 0
    assert capsys.readouterr().out.count("kept (finished before)") == 4 * len(modes)
    assert [(r["sft"], r["rl"]) for r in json.loads(out.read_text())["rows"]] == [(r["sft"], r["rl"]) for r in rows]
    # a model without its run (--rl-checkpoint alone): the budget of its rows; the reports of the same checkpoints kept
    assert table_here("measure", "--seed", "0", "--method", "ppo", "--sft-checkpoint", sft, "--rl-checkpoint", ckpt,
                      *goals, "--modes", modes[-1], "--out", out) == 0
    assert capsys.readouterr().out.count("kept (finished before)") == 4
    assert {r["env_steps"] for r in json.loads(out.read_text())["rows"]} == {32}
    models = tmp_path / "models"  # the exported models are other files: their reports are not the run's
    exported = {"sft": models / "metaworld_mt10_seed0_sft.pt", "ppo": models / "metaworld_mt10_seed0_ppo.pt"}
    finished, kwargs, other = table_script().finished, {"max_episode_steps": 20}, {"greedy": "sampled"}
    for who, checkpoint in {"sft": sft, "ppo": ckpt}.items():
        report = tmp_path / "evals" / f"{who}_s0_train_{modes[0]}"
        assert finished(report, str(checkpoint), modes[0], kwargs)
        assert not finished(report, str(exported[who]), modes[0], kwargs)
        assert not finished(report, str(checkpoint), other[modes[0]], kwargs)  # nor a report of the other mode
    if long_form:  # the exported models, measured again without their run: the budget of their rows
        assert table_here("measure", "--seed", "0", "--method", "ppo", "--sft-checkpoint", exported["sft"],
                          "--rl-checkpoint", exported["ppo"], "--train-goals", "0-1", "--heldout-goals", "40",
                          "--modes", "sampled", "--evals", tmp_path / "evals_again", "--env-kwarg",
                          "max_episode_steps=20", "--out", out) == 0
        assert capsys.readouterr().out.count("kept (finished before)") == 0
        assert {r["env_steps"] for r in json.loads(out.read_text())["rows"]} == {32}
    with pytest.raises(SystemExit, match="give --rl-run"):
        table_here("measure", "--seed", "1", "--method", "ppo", "--sft-checkpoint", sft, "--rl-checkpoint",
                   exported["ppo"], "--evals", tmp_path / "evals_again", "--out", out)


@pytest.mark.usefixtures("one_torch_thread")  # the in-process runs set torch_threads=1: restored after the module
def test_demos_sft_one_rl_update_and_the_table_in_short_form(mw, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the product commands run from the repository root
    chain(tmp_path, capsys, long_form=False)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_demos_sft_rl_updates_and_the_table_in_long_form(mw, tmp_path, capsys, monkeypatch):
    """The chain with one GRPO update from the SFT too, both modes, and the exported models measured again."""
    monkeypatch.chdir(ROOT)
    chain(tmp_path, capsys, long_form=True)


@pytest.mark.quick
def test_readme_shows_the_measured_rows():
    """experiments/metaworld_mt10/README.md's table = its results.json (``table.py readme --check``), and the rows
    name models that are there."""
    table = table_script()
    data = json.loads(table.RESULTS.read_text())
    assert data["rows"] and all(row["suite"] == "mt10" for row in data["rows"])
    assert all((ROOT / row[k]).is_file() for row in data["rows"] for k in ("sft_checkpoint", "rl_checkpoint"))
    assert table.main(["readme", "--check"]) == 0, f"run: python {TABLE} readme"
