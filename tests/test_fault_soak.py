"""experiments/reliability_soaks/fault_soak.py: LIBERO GRPO under torchrun survives killed and hung env workers, a
SIGKILLed trainer restarted with the same command and a truncated checkpoint, and loses no update, checkpoint or
episode.

The short form runs the real thing (2 torchrun processes, async LIBERO workers, each fault once) in about two
minutes; the default run injects the trainer's kill only (``-m slow`` runs all three faults). The quick tests check the
supervisor's pieces (/proc parsing, the accounting, the time lost) and the fix it found: a resumed run's TensorBoard
log kept the update of the checkpoint it resumed from.
"""
from __future__ import annotations

import functools
import json
import os
import pathlib
import sys
import time

import pytest
import torch

SOAKS = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "reliability_soaks"
sys.path.insert(0, str(SOAKS))  # the study's scripts, imported by their module names below


def fake_proc(root: pathlib.Path, rows: list[tuple[int, int, str, str]]) -> pathlib.Path:
    """A /proc-like folder: ``(pid, ppid, state, cmdline)`` rows; the command name holds a space and parentheses."""
    for pid, ppid, state, cmdline in rows:
        folder = root / str(pid)
        folder.mkdir(parents=True)
        (folder / "stat").write_text(f"{pid} (py (x) y) {state} {ppid} {pid} {pid} 0 -1 4194560\n")
        (folder / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
    (root / "self").mkdir()
    return root


@pytest.mark.quick
def test_env_workers_are_the_spawned_children_of_the_trainer_ranks(tmp_path):
    from fault_soak import descendants, env_workers, parse_stat, process_table, state

    spawn = "python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=7) --multiprocessing-fork"
    proc = fake_proc(tmp_path, [
        (100, 1, "S", "python -m torch.distributed.run --standalone --nproc_per_node=2 trainers/grpo.py --config x"),
        (101, 100, "S", "python -u trainers/grpo.py --config x"),
        (102, 100, "R", "python -u trainers/grpo.py --config x"),
        (201, 101, "R", spawn),
        (202, 101, "S", "python -c from multiprocessing.resource_tracker import main;main(6)"),
        (203, 102, "Z", spawn),                    # a dead worker not reaped yet
        (204, 102, "T", spawn),                    # a stopped (hung) one is still a worker
        (300, 1, "S", spawn),                      # someone else's worker
    ])
    assert parse_stat("7 (a) b) R 3 7 7") == (7, "R", 3, 7)
    table = process_table(proc)
    assert sorted(table) == [100, 101, 102, 201, 202, 203, 204, 300] and table[201].cmdline == spawn
    assert descendants(table, 100) == [101, 102, 201, 202, 203, 204]
    assert env_workers(table, 100) == [201, 204]
    assert state(204, proc) == "T" and state(999, proc) is None
    assert env_workers(process_table(), os.getpid()) == []  # the real /proc reads


@pytest.mark.quick
def test_no_fault_after_the_last_update(tmp_path):
    """A fault during the final save tests nothing and its cost cannot be timed: a loaded host once put one there."""
    from fault_soak import Plan, Soak

    soak = Soak(Plan(updates=3), tmp_path, timeout_s=60)
    soak.completions = [{"update": u, "time": 10.0 + u, "start": 1} for u in (1, 2)]
    assert soak.fault_is_due(settle_from=0.0) and not soak.fault_is_due(settle_from=11.5)  # 2 updates since
    soak.completions.append({"update": 3, "time": 13.0, "start": 1})
    assert not soak.fault_is_due(settle_from=0.0)


@pytest.mark.quick
def test_the_budget_ends_the_run_after_exactly_the_planned_updates():
    from fault_soak import Plan, trainer_command

    plan = Plan(updates=9, group_size=2, groups_per_update=2, max_episode_steps=16)
    steps = plan.steps_per_update
    assert steps == 64 and plan.episodes_per_update == 4
    assert 8 * steps < plan.total_timesteps <= 9 * steps - (steps - 1)  # 8 full updates are short of it, 9 reach it
    command = trainer_command(plan, pathlib.Path("/tmp/soak"))
    assert command[2:5] == ["torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    assert "trainers/grpo.py" in command and "checkpoint.every=1" in command and "grpo.min_mixed_groups=0" in command
    assert f"total_timesteps={plan.total_timesteps}" in command and "checkpoint.resume=auto" in command


@pytest.mark.quick
def test_time_lost_is_the_faulted_interval_beyond_a_normal_update():
    from fault_soak import time_lost

    def done(update, at, start=1):
        return {"update": update, "time": at, "start": start, "loads": True}

    completions = [done(1, 10), done(2, 15), done(3, 35), done(4, 40), done(5, 45),   # worker fault at 16
                   done(5, 80, 2), done(6, 85, 2), done(7, 90, 2)]                       # trainer kill at 46
    faults = [{"kind": "kill-worker", "time": 16.0}, {"kind": "kill-trainer", "time": 46.0}]
    typical, lost = time_lost(faults, completions)
    assert typical == 5
    assert lost == [15.0, 35.0]  # 2 -> 3 took 20 s; 5 done at 45, then first past 5 (6) at 85: 40 s
    assert time_lost([{"kind": "kill-worker", "time": 1.0}], completions)[1] == [None]  # before any update


@pytest.mark.quick
def test_episodes_are_counted_from_the_history_cut_ones_from_the_steps():
    from fault_soak import Plan, account_episodes

    plan = Plan(updates=3, group_size=2, groups_per_update=2, max_episode_steps=16)
    history = [{"step": 64, "groups": 2.0, "episode_len": 16.0},
               {"step": 112, "groups": 2.0, "episode_len": 16.0},   # one episode cut: 3 x 16 steps
               {"step": 176, "groups": 2.0, "episode_len": 16.0}]
    figures = account_episodes(history, plan, final_steps=176)
    assert figures == {"updates_logged": 3, "steps_increasing": True, "episodes": 12, "episodes_planned": 12,
                       "episodes_cut": 1, "last_step": 176, "final_num_timesteps": 176}
    figures = account_episodes(history[:1] + history[2:], plan, final_steps=176)   # an update lost from the log
    assert figures["updates_logged"] == 2 and figures["episodes"] == 8


@pytest.mark.quick
def test_checkpoint_watcher_and_the_end_check(tmp_path):
    from fault_soak import CheckpointWatcher, Plan, check_checkpoints, readable

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    watcher = CheckpointWatcher(folder)

    def save(update):
        torch.save({"counters": {"num_updates": update, "num_timesteps": 64 * update}}, folder / f"ckpt_{update:08d}.pt")

    save(1)
    save(2)
    assert [(u, p.name) for u, _, p in watcher.poll()] == [(1, "ckpt_00000001.pt"), (2, "ckpt_00000002.pt")]
    assert watcher.poll() == [] and watcher.newest().name == "ckpt_00000002.pt"
    path = folder / "ckpt_00000002.pt"
    os.truncate(path, path.stat().st_size // 2)
    watcher.ignore(path)
    assert watcher.poll() == [] and readable(path, 2) is False and readable(folder / "ckpt_00000009.pt", 9) is None
    plan = Plan(updates=3, keep_last=2)
    completions = [{"update": 1, "time": 1.0, "loads": True}, {"update": 2, "time": 2.0, "loads": True}]
    truncations = [{"path": str(path), "update": 2, "time": 2.5}]
    bad = check_checkpoints(folder, plan, completions, truncations)
    assert not bad["ok"] and bad["truncated"][0]["fate"] == "not rewritten, on disk"
    save(2)   # the resumed run writes update 2 again, then 3 (keep_last prunes 1)
    save(3)
    (folder / "ckpt_00000001.pt").unlink()
    completions += [{"update": 2, "time": 3.0, "loads": True}, {"update": 3, "time": 4.0, "loads": True}]
    good = check_checkpoints(folder, plan, completions, truncations)
    assert good["ok"] and good["final"]["num_updates"] == 3 and good["truncated"][0]["fate"] == "rewritten, on disk"
    (folder / "ckpt_00000004.pt.tmp").write_bytes(b"half")
    assert not check_checkpoints(folder, plan, completions, truncations)["ok"]  # a save cut short was left


@pytest.mark.quick
def test_a_resumed_run_keeps_the_log_of_the_update_it_resumed_from(tmp_path):
    """The bug the soak found: the resumed logger purged from the checkpoint's own step, so TensorBoard lost that
    update's record (every trainer restart dropped one update from the history)."""
    from fault_soak import read_history

    from vla_gym.trainers.runtime.config import LoggingConfig
    from vla_gym.trainers.runtime.logger import RunLogger

    cfg = LoggingConfig(progress_bar=False)
    first = RunLogger(cfg, tmp_path)
    for step in (64, 128, 192, 256):      # updates 1-4; the run is killed after update 4 ...
        first.log({"rollout/groups": 2.0, "env/episode_len": 16.0}, step)
    first.close()
    # TensorBoard reads event files in name order: the creation time in whole seconds, then host, pid and a
    # per-process counter compared as text ("9" after "10"). A resumed run is a new process seconds later; here
    # both writers share one process (a pytest worker with many writers before), so the second starts a second later.
    time.sleep(1.05)
    second = RunLogger(cfg, tmp_path, initial_step=128)   # ... and resumes from update 2's checkpoint
    for step in (192, 256, 320):
        second.log({"rollout/groups": 1.0, "env/episode_len": 16.0}, step)
    second.close()
    history = read_history(tmp_path / "tensorboard")
    assert [row["step"] for row in history] == [64, 128, 192, 256, 320]
    assert [row["groups"] for row in history] == [2.0, 2.0, 1.0, 1.0, 1.0]  # the replayed updates replace the old


#: (extra flags, faults injected, updates): the default run's soak kills the whole trainer (then truncates its newest
#: checkpoint and restarts it with the same command); a killed or hung env worker takes the respawn path that
#: tests/test_vector_faults.py runs on real async workers, so the short form with all three faults is ``slow``
SOAKS_RUN = [
    pytest.param(["--faults", "kill-trainer", "--updates", "4"],
                 {"kill-worker": 0, "hang-worker": 0, "kill-trainer": 1}, 4, id="kill-trainer"),
    pytest.param([], {"kill-worker": 1, "hang-worker": 1, "kill-trainer": 1}, 9, id="every-fault",
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("flags, faults, updates", SOAKS_RUN)
def test_short_soak_survives_every_fault(tmp_path, capsys, flags, faults, updates):
    """The short form end to end: each of its faults once, and every check of the soak holds. The supervisor's
    ``main`` runs in this process; the trainer it faults is torchrun's own process tree, as in the long form."""
    pytest.importorskip("libero.libero", reason='LIBERO is not installed: pip install -e ".[libero]"')
    from fault_soak import SHORT
    from fault_soak import main as soak_main

    out = tmp_path / "soak.json"
    code = soak_main(["--short", *flags, "--json", str(out), "--run-dir", str(tmp_path / "soak")])
    stdout = capsys.readouterr().out
    summary = json.loads(out.read_text())
    failed = {name: check["detail"] for name, check in summary["checks"].items() if not check["ok"]}
    assert code == 0 and summary["ok"] and not failed, (failed, stdout[-3000:])
    assert flags or updates == SHORT["updates"]
    assert summary["faults_by_kind"] == faults
    assert summary["trainer_starts"] == 2 and summary["exit_codes"] == [-9, 0]
    assert summary["worker_restarts_logged"] >= faults["kill-worker"] + faults["hang-worker"]
    assert summary["episodes"]["episodes"] == summary["episodes"]["episodes_planned"] == updates * 4
    assert summary["checkpoints"]["final"]["num_updates"] == updates
    assert summary["resumes"][0]["skipped"] and summary["resumes"][0]["resumed"]
    assert summary["time_lost_s"] > 0 and all(f["lost_s"] is not None for f in summary["faults"])
    assert ("SIGSTOP" in stdout) == bool(faults["hang-worker"]) and "truncated ckpt_" in stdout
    # the README's table, printed at the end and again from the saved summary
    assert soak_main(["--table", str(out)]) == 0
    table = capsys.readouterr().out
    assert table in stdout and f"| updates planned / done | {updates} / {updates} |" in table
    injected = " / ".join(str(faults[kind]) for kind in ("kill-worker", "hang-worker", "kill-trainer"))
    assert f"| faults injected: kill-worker / hang-worker / kill-trainer | {injected} |" in table
    assert "| checks | all passed |" in table


@pytest.mark.quick
def test_grpo_survives_a_worker_that_dies_in_the_first_step_of_an_episode(tmp_path, monkeypatch):
    """The bug the soak found: an episode cut at its first step had no success report, and GRPO (score=success)
    stopped the run ("does not report info['success']"). The respawned step now says success False."""
    from fault_envs import chunked_vla_env
    from gymnasium.vector import AutoresetMode

    from vla_gym.trainers import GRPO
    from vla_gym.vector.envs import VLAAsyncVectorEnv

    # the first episode of each task dies at sub-step 2, inside the episode's first (chunked) step
    env_fn = functools.partial(chunked_vla_env, chunk_size=4, fault="kill", fault_init_state=0, at=2,
                               once_dir=str(tmp_path))
    envs = VLAAsyncVectorEnv([env_fn], env_id="faulty", autoreset_mode=AutoresetMode.SAME_STEP, step_timeout=20.0,
                             on_worker_failure="respawn", context="fork")
    grpo = GRPO("mlp", envs, group_size=2, groups_per_update=1, n_epochs=1, batch_size=16, train_init_states=1,
                filter_uniform_groups=False, policy_kwargs={"hidden_sizes": [8], "critic": False})
    seen = []
    import vla_gym.trainers.grpo as grpo_module

    play = grpo_module.play_recorded
    monkeypatch.setattr(grpo_module, "play_recorded", lambda *args, **kwargs: seen.append(play(*args, **kwargs)) or seen[-1])
    try:
        grpo.learn(1)
    finally:
        grpo.close()
    results = seen[0][0]
    assert grpo.num_updates == 1 and envs.worker_restarts == 1
    assert [(r.success, r.env_failure is not None) for r in results] == [(False, True), (False, False)]
    assert "during step()" in results[0].env_failure
