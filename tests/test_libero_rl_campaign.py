"""experiments/libero_miniature/campaign.py in short form on real LIBERO: one task, one training and one held-out
start, 8-step episodes, 64 px. A first call with a one-second budget fits the SFT and stops before GRPO; the same
command then plays every step (a one-update GRPO run kept in the campaign folder, then SFT and RL evaluations pair
by pair, each pair's row written once both are in); a third call finds every output and runs nothing;
``--method residual`` then trains residual RL on the same SFT and evaluates only its model, and ``--method rft`` one
RFT round from it, whose first and last greedy evaluations are the SFT's and its own train/greedy reports (read, not
played again).
"""
from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
import torch

pytest.importorskip("pyarrow")
pytest.importorskip("libero")

from short_runs import ROOT, SHORT_IMAGE_SIZE, child_env, executable  # noqa: E402

SHORT_ENV = [f"env.kwargs.image_size={SHORT_IMAGE_SIZE}", "env.kwargs.max_episode_steps=8"]
SHORT_RL = {  # one env in this process, 2 episodes of 8 steps (16 env steps)
    "grpo": [*SHORT_ENV, "env.num_envs=1", "env.vectorization=sync", "grpo.group_size=2", "grpo.groups_per_update=1",
             "grpo.min_mixed_groups=0", "grpo.filter_uniform_groups=false", "grpo.skip_failed_after=0",
             "grpo.batch_size=8", "torch_threads=1", "logging.progress_bar=false"],
    "residual": [*SHORT_ENV, "env.num_envs=1", "env.vectorization=sync", "residual.episodes_per_round=1",
                 "residual.warmup_episodes=0", "residual.actor_warmup=0", "residual.batch_size=8",
                 "residual.actor_every=1", "torch_threads=1", "logging.progress_bar=false"],
    # RFT's overrides are its fit's (trainers/sft.py); its evaluations play the SFT checkpoint's short env
    "rft": [*SHORT_ENV, "sft.max_steps=2", "sft.batch_size=4", "torch_threads=1", "logging.progress_bar=false",
            "checkpoint.resume=null"],
}


def campaign(tmp_path, *extra: str, method: str = "grpo", timeout: int = 900,
             eval_override: bool = True) -> subprocess.CompletedProcess:
    command = [
        *executable("python"), "experiments/libero_miniature/campaign.py", "--suite", "object", "--seed", "0",
        "--method", method,
        "--tasks", "0", "--train-init-states", "0", "--heldout-init-states", "40", "--train-rl-init-states", "1",
        "--demos", str(tmp_path / "demos"), "--rl-steps", "16", "--num-envs", "1",
        "--state", str(tmp_path / "state"), "--work", str(tmp_path / "work"),
        "--export-dir", str(tmp_path / "exported"), "--results", str(tmp_path / "libero_rl.json"),
        "--sft-override", *SHORT_ENV, "sft.max_steps=2", "sft.batch_size=4", "torch_threads=1",
        "logging.progress_bar=false", "checkpoint.resume=null",
        "--rl-override", *SHORT_RL[method],
        *(["--eval-override", *SHORT_ENV, "env.vectorization=sync"] if eval_override else []), *extra]
    result = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=timeout,
                            check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_campaign_runs_in_short_form_resumes_and_writes_the_rows(tmp_path):
    from vla_gym.data.record import record_demos

    record_demos("VLA/LiberoObject-v0", tmp_path / "demos", episodes_per_task=1, task_ids=[0], keep_failures=True,
                 progress=False, cameras=["main"], image_size=SHORT_IMAGE_SIZE, max_episode_steps=8)
    state = tmp_path / "state"

    first = campaign(tmp_path, "--minutes", "0.001")  # out of time once the SFT is fitted
    sft = tmp_path / "exported" / "libero_object_seed0_sft_protocol.pt"  # exported once, named by the campaign
    assert (state / "sft.txt").read_text().strip() == str(sft) and sft.is_file() and not (state / "evals").exists()
    assert "[x] sft" in first.stdout and "[ ] grpo (0 of 16" in first.stdout and "in progress" in first.stdout
    assert first.stdout.index("] grpo") < first.stdout.index("] sft train greedy")  # the long step comes first
    partial = state / "evals" / "sft_train_greedy" / "partial"  # as a session that stopped mid-evaluation leaves it
    partial.mkdir(parents=True)
    (partial / "rank0.jsonl").write_text("{}\n{}\n")
    assert "[ ] sft train greedy (2 episodes played)" in campaign(tmp_path, "--status").stdout

    second = campaign(tmp_path)
    assert "trainers/sft.py" not in second.stdout  # kept from the first call
    assert second.stdout.count("trainers/eval.py") == 8 and second.stdout.count("trainers/grpo.py") == 1
    first_row = second.stdout.index("experiments/libero_miniature/table.py")
    assert second.stdout[:first_row].count("trainers/eval.py") == 2  # SFT and RL of one (split, mode), then its row
    checkpoints = sorted((state / "grpo" / "checkpoints").glob("ckpt_*.pt"))
    assert len(checkpoints) == 1 and (state / "grpo" / "tensorboard").is_dir()  # keep_last=1, in the campaign folder
    finished = torch.load(checkpoints[0], weights_only=False)  # slimmed for committing once GRPO had its steps
    assert finished["optimizer"] is None and finished["counters"]["num_timesteps"] >= 16
    report = json.loads((state / "evals" / "rl_heldout_sampled" / "eval.json").read_text())
    assert report["settings"]["checkpoint"] == str(checkpoints[0]) and report["settings"]["deterministic"] is False
    assert report["settings"]["std"] == 0.05
    rows = json.loads((tmp_path / "libero_rl.json").read_text())["rows"]
    assert sorted((r["split"], r["mode"]) for r in rows) == [("heldout", "greedy"), ("heldout", "sampled"),
                                                             ("train", "greedy"), ("train", "sampled")]
    assert {(r["method"], r["variant"], r["episodes"], r["env_steps"]) for r in rows} == {("grpo", "protocol", 1, 16)}
    assert {r["init_states"][0] for r in rows} == {0, 40}
    assert {r["sft_checkpoint"] for r in rows} == {str(sft)}  # the rows point at the campaign's one SFT file
    assert sorted(path.name for path in (tmp_path / "exported").iterdir()) == [
        "libero_object_seed0_grpo_protocol.pt", "libero_object_seed0_sft_protocol.pt"]
    assert not list(state.glob("*.pt"))  # no second copy of a model in the campaign folder
    assert (state / "grpo_curve.png").is_file() and "| 1 |" in (state / "grpo_curve.md").read_text()  # step 5
    assert "complete" in second.stdout

    third = campaign(tmp_path, timeout=300)
    assert "trainers/" not in third.stdout and "complete" in third.stdout
    assert "experiments/libero_miniature/table.py" not in third.stdout  # the rows keep the commit that measured them

    # residual RL on the same SFT: its run and reports beside GRPO's, the SFT's reports read, not played again
    residual = campaign(tmp_path, method="residual")
    assert "trainers/sft.py" not in residual.stdout and "trainers/grpo.py" not in residual.stdout
    assert residual.stdout.count("running: trainers/residual.py") == 1
    assert residual.stdout.count("running: trainers/eval.py") == 4
    assert "policy.kwargs.base_checkpoint=" in residual.stdout and "complete" in residual.stdout
    run = state / "residual"
    (checkpoint,) = sorted((run / "checkpoints").glob("ckpt_*.pt"))
    finished = torch.load(checkpoint, weights_only=False)  # slimmed: no critics, no replay, no second copy
    assert finished["td3"] is None and finished["counters"]["num_timesteps"] >= 16
    assert not (run / "replay.pt").exists() and not (run / "final.pt").exists()
    report = json.loads((state / "evals" / "residual_train_greedy" / "eval.json").read_text())
    assert report["settings"]["checkpoint"] == str(checkpoint)
    rows = json.loads((tmp_path / "libero_rl.json").read_text())["rows"]
    assert sorted((r["method"], r["variant"]) for r in rows) == [("grpo", "protocol")] * 4 + [("residual", "")] * 4
    assert {r["sft"] for r in rows if r["method"] == "residual"} <= {r["sft"] for r in rows if r["method"] == "grpo"}
    assert (tmp_path / "exported" / "libero_object_seed0_residual.pt").is_file()
    assert (state / "residual_curve.png").is_file()

    # one RFT round from the same SFT (its evaluations as trainers/rft.py plays them: the checkpoint's short env)
    rft = campaign(tmp_path, method="rft", eval_override=False)
    assert "trainers/sft.py" not in rft.stdout.split("running: trainers/rft.py")[0]  # the campaign's SFT is kept
    assert rft.stdout.count("running: trainers/rft.py") == 1 and "--samples-per-start 1" in rft.stdout
    run = state / "rft"
    round_0 = json.loads((run / "round_0" / "eval" / "eval.json").read_text())
    assert round_0 == json.loads((state / "evals" / "sft_train_greedy" / "eval.json").read_text())  # read, not played
    assert rft.stdout.count("running: trainers/eval.py") == 1 + 1 + 3  # the round's sample and greedy, 3 pairs
    checkpoint = run / "round_1" / "sft" / "final.pt"
    report = json.loads((state / "evals" / "rft_train_greedy" / "eval.json").read_text())
    assert report == json.loads((run / "round_1" / "eval" / "eval.json").read_text())  # the round's own report
    assert report["settings"]["checkpoint"] == str(checkpoint) and report["settings"]["deterministic"] is True
    assert not (run / "round_1" / "sft" / "checkpoints").exists()  # slimmed: final.pt is the model
    rows = [r for r in json.loads((tmp_path / "libero_rl.json").read_text())["rows"] if r["method"] == "rft"]
    assert sorted((r["variant"], r["split"], r["mode"]) for r in rows) == [
        ("protocol", "heldout", "greedy"), ("protocol", "heldout", "sampled"), ("protocol", "train", "greedy"),
        ("protocol", "train", "sampled")]
    assert {r["env_steps"] for r in rows} == {json.loads((run / "rft.json").read_text())["rows"][1]["env_steps"]}
    # exported beside the others (8-step episodes succeed nowhere, so this fit is the SFT's again: its file is reused)
    assert {pathlib.Path(r["rl_checkpoint"]).parent for r in rows} == {tmp_path / "exported"}
    assert all(pathlib.Path(r["rl_checkpoint"]).is_file() for r in rows)
    assert (state / "rft_curve.png").is_file() and "| 1 |" in (state / "rft_curve.md").read_text()
    assert "complete" in rft.stdout and "[x] rft (1 of 1 rounds)" in rft.stdout


def test_more_cameras_make_a_campaign_of_their_own():
    """``--cameras main wrist``: demos, SFT and RL see the wrist camera too, in a folder, model names and rows of
    their own, so the main-camera campaign of the same (suite, seed) is untouched."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("libero_rl_campaign",
                                                  ROOT / "experiments" / "libero_miniature" / "campaign.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    plain = module.Campaign(module.parse_args(["--suite", "spatial", "--seed", "0", "--method", "residual"]))
    wrist = module.Campaign(module.parse_args(["--suite", "spatial", "--seed", "0", "--method", "residual",
                                               "--cameras", "main", "wrist"]))
    assert (plain.state.name, plain.variant, plain.sft_variant) == ("spatial_s0", "", "protocol")
    assert plain.camera_overrides(policy=True) == []
    assert (wrist.state.name, wrist.work.name, wrist.variant, wrist.sft_variant) == (
        "spatial_s0_wrist", "spatial_s0_wrist", "wrist", "protocol_wrist")
    assert wrist.camera_overrides(policy=False) == ["env.kwargs.cameras=[main,wrist]"]  # residual: the SFT's policy
    grpo = module.Campaign(module.parse_args(["--suite", "spatial", "--seed", "0", "--cameras", "main", "wrist"]))
    assert grpo.variant == "protocol_wrist"
    assert grpo.camera_overrides(policy=True) == ["env.kwargs.cameras=[main,wrist]", "policy.kwargs.cameras=[main,wrist]"]
