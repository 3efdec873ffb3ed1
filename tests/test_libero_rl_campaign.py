"""experiments/libero_miniature/campaign.py in short form on real LIBERO: one task, one training and one held-out
start, 8-step episodes, 64 px.

In the default run, the method that carries the study, RFT (``--method rft``, greedy evaluations only): a first
call with a one-second budget fits the SFT and stops before RFT; the same command then plays every step (one RFT
round from the SFT, then SFT and RFT evaluations pair by pair, each pair's row written once both are in, the RFT
model's train/greedy report being its round's own, read, not played again); a third call finds every output and
runs nothing. The status and the calls that only check the campaign's bookkeeping run in this process.

The long form (``slow``) plays the whole chain in both modes: GRPO from the SFT, then ``--method residual`` on the
same SFT (its model alone evaluated) and ``--method rft`` one round from it, whose first and last greedy
evaluations are the SFT's and its own train/greedy reports (read, not played again). GRPO's and residual RL's
trainers have short forms of their own (tests/test_examples.py, tests/test_residual.py).
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


#: the default run's SFT policy: a small CNN in place of the study's pretrained small VLA, whose encoders every fit
#: and evaluation would load again (the campaign's steps are what is tested; the long form keeps the study's policy)
TINY_POLICY = ("policy.name=cnn", "policy.kwargs={image_features: 16, hidden_sizes: [32], critic: false}")
SCRIPT = "experiments/libero_miniature/campaign.py"
TABLE = "experiments/libero_miniature/table.py"


def campaign_script():
    """experiments/libero_miniature/campaign.py as a module (a study script: not on the import path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("libero_rl_campaign", ROOT / SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record_short_demos(tmp_path) -> None:
    from vla_gym.data.record import record_demos

    record_demos("VLA/LiberoObject-v0", tmp_path / "demos", episodes_per_task=1, task_ids=[0], keep_failures=True,
                 progress=False, cameras=["main"], image_size=SHORT_IMAGE_SIZE, max_episode_steps=8)


def campaign_args(tmp_path, *extra: str, method: str, eval_override: bool, policy: tuple[str, ...] = ()) -> list[str]:
    """The short form's flags; ``policy``: overrides of the SFT's policy (RFT's fits take them too)."""
    return [
        "--suite", "object", "--seed", "0", "--method", method,
        "--tasks", "0", "--train-init-states", "0", "--heldout-init-states", "40", "--train-rl-init-states", "1",
        "--demos", str(tmp_path / "demos"), "--rl-steps", "16", "--num-envs", "1",
        "--state", str(tmp_path / "state"), "--work", str(tmp_path / "work"),
        "--export-dir", str(tmp_path / "exported"), "--results", str(tmp_path / "libero_rl.json"),
        "--sft-override", *SHORT_ENV, "sft.max_steps=2", "sft.batch_size=4", "torch_threads=1",
        "logging.progress_bar=false", "checkpoint.resume=null", *policy,
        "--rl-override", *SHORT_RL[method], *(policy if method == "rft" else ()),
        *(["--eval-override", *SHORT_ENV, "env.vectorization=sync"] if eval_override else []), *extra]


def campaign(tmp_path, *extra: str, method: str = "grpo", timeout: int = 900, eval_override: bool = True,
             policy: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The campaign as a user runs it: its own process, each step a product command."""
    command = [*executable("python"), SCRIPT,
               *campaign_args(tmp_path, *extra, method=method, eval_override=eval_override, policy=policy)]
    result = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=timeout,
                            check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def campaign_here(tmp_path, capfd, *extra: str, method: str, eval_override: bool,
                  policy: tuple[str, ...] = ()) -> str:
    """The same command in this process (its steps still product commands, their output captured too): stdout."""
    capfd.readouterr()
    argv = campaign_args(tmp_path, *extra, method=method, eval_override=eval_override, policy=policy)
    assert campaign_script().main(argv) == 0
    return capfd.readouterr().out


def test_rft_campaign_runs_in_short_form_resumes_and_writes_the_rows(tmp_path, capfd, monkeypatch):
    for name, value in child_env().items():  # what the campaign's own process would hand its steps
        monkeypatch.setenv(name, value)
    record_short_demos(tmp_path)
    state = tmp_path / "state"
    short = ("--modes", "greedy", "--sync")  # greedy evaluations only, their envs in the evaluating process
    # RFT plays its evaluations with the checkpoint's short env (no --eval-override), as trainers/rft.py does
    rft = {"method": "rft", "eval_override": False, "policy": TINY_POLICY}

    first = campaign_here(tmp_path, capfd, "--minutes", "0.001", *short, **rft)
    sft = tmp_path / "exported" / "libero_object_seed0_sft_protocol.pt"  # exported once, named by the campaign
    assert (state / "sft.txt").read_text().strip() == str(sft) and sft.is_file() and not (state / "evals").exists()
    assert "[x] sft" in first and "[ ] rft (0 of 1 rounds)" in first and "in progress" in first
    assert first.index("] rft") < first.index("] sft train greedy")  # the long step comes first
    plan = [line.split("] ", 1)[1] for line in first.splitlines() if line.startswith("  [")]
    assert plan == ["sft", "rft (0 of 1 rounds)", "sft train greedy", "rft train greedy", "sft heldout greedy",
                    "rft heldout greedy", "curve"]  # --modes greedy: no sampled evaluation is planned
    partial = state / "evals" / "sft_train_greedy" / "partial"  # as a session that stopped mid-evaluation leaves it
    partial.mkdir(parents=True)
    (partial / "rank0.jsonl").write_text("{}\n{}\n")
    status = campaign_here(tmp_path, capfd, "--status", *short, **rft)
    assert "[ ] sft train greedy (2 episodes played)" in status and "running:" not in status

    second = campaign(tmp_path, *short, **rft).stdout
    assert "trainers/sft.py" not in second.split("running: trainers/rft.py")[0]  # kept from the first call
    assert second.count("running: trainers/rft.py") == 1 and "--samples-per-start 1" in second
    # trainers/rft.py: round 0's greedy evaluation, the round's sample and its greedy evaluation; then the pairs:
    # the SFT on the training starts (RFT's report there is its round's, read), both models on the held-out one
    assert second.count("running: trainers/eval.py") == 3 + 3
    first_row = second.index(f"running: {TABLE}")
    assert second[:first_row].count("running: trainers/eval.py") == 3 + 1  # the train pair, then its row
    assert second.count(f"running: {TABLE}") == 2
    assert "env.vectorization=async" not in second and " --sync " in second  # --sync: trainers/rft.py's too
    run = state / "rft"
    checkpoint = run / "round_1" / "sft" / "final.pt"
    report = json.loads((state / "evals" / "rft_train_greedy" / "eval.json").read_text())
    assert report == json.loads((run / "round_1" / "eval" / "eval.json").read_text())  # the round's own report
    assert report["settings"]["checkpoint"] == str(checkpoint) and report["settings"]["deterministic"] is True
    heldout = json.loads((state / "evals" / "rft_heldout_greedy" / "eval.json").read_text())
    assert heldout["settings"]["checkpoint"] == str(checkpoint) and heldout["settings"]["deterministic"] is True
    assert not (run / "round_1" / "sft" / "checkpoints").exists()  # slimmed: final.pt is the model
    assert not list((state / "evals").glob("*_sampled"))
    rows = json.loads((tmp_path / "libero_rl.json").read_text())["rows"]
    assert sorted((r["method"], r["variant"], r["split"], r["mode"]) for r in rows) == [
        ("rft", "protocol", "heldout", "greedy"), ("rft", "protocol", "train", "greedy")]
    assert {r["env_steps"] for r in rows} == {json.loads((run / "rft.json").read_text())["rows"][1]["env_steps"]}
    assert {r["init_states"][0] for r in rows} == {0, 40}
    assert {r["sft_checkpoint"] for r in rows} == {str(sft)}  # the rows point at the campaign's one SFT file
    # exported beside the SFT (8-step episodes succeed nowhere, so this fit is the SFT's again: its file is reused)
    assert {pathlib.Path(r["rl_checkpoint"]).parent for r in rows} == {tmp_path / "exported"}
    assert all(pathlib.Path(r["rl_checkpoint"]).is_file() for r in rows)
    assert not list(state.glob("*.pt"))  # no second copy of a model in the campaign folder
    assert (state / "rft_curve.png").is_file() and "| 1 |" in (state / "rft_curve.md").read_text()
    assert "complete" in second and "[x] rft (1 of 1 rounds)" in second

    third = campaign_here(tmp_path, capfd, *short, **rft)
    assert "trainers/" not in third and "complete" in third
    assert TABLE not in third  # the rows keep the commit that measured them


@pytest.mark.slow
def test_campaign_long_form_grpo_then_residual_and_rft_on_the_same_sft(tmp_path):
    """The long form: GRPO, then residual RL and RFT on the same SFT, greedy and sampled."""
    record_short_demos(tmp_path)
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
    assert finished["extra"]["td3"] is None and finished["counters"]["num_timesteps"] >= 16
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
    module = campaign_script()
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


def test_the_token_head_makes_a_campaign_of_its_own(tmp_path):
    """``--head tokens``: the SFT fits the token head, GRPO runs the anchors' settings on it, RFT's rounds and the
    sampled evaluations draw at temperature 1.6 (later RFT rounds at the same width: --hold-entropy), in a folder, model
    names and rows of their own."""
    module = campaign_script()
    tokens = module.Campaign(module.parse_args(["--suite", "object", "--seed", "0", "--head", "tokens"]))
    assert (tokens.state.name, tokens.variant, tokens.sft_variant) == ("object_s0_tokens", "protocol_tokens",
                                                                       "protocol_tokens")
    assert tokens.camera_overrides(policy=True) == ["policy.kwargs.head=tokens"]
    assert tokens.camera_overrides(policy=False) == []
    assert tokens.modes == {"greedy": [], "sampled": ["--stochastic", "--temperature", "1.6"]}
    # its SFT is stored in half precision before anything plays it: the evaluations, GRPO and git hold one model
    tokens.args.export_dir, tokens.state = str(tmp_path / "models"), tmp_path / "adopted"
    tokens.keep_sft(module.MODELS / "libero_object_seed0_sft_protocol_tokens.pt")
    assert tokens.sft == tmp_path / "models" / "libero_object_seed0_sft_protocol_tokens.pt"
    assert {value.dtype for value in torch.load(tokens.sft, weights_only=False)["policy"].values()} == {torch.float16}
    (tmp_path / "other").mkdir()  # another model under that name (here the same weights in float32): not written over
    tokens.args.export_dir = str(tmp_path / "other")
    float32 = torch.load(module.MODELS / tokens.sft.name, weights_only=False)
    float32["policy"] = {key: value.float() if value.is_floating_point() else value
                         for key, value in float32["policy"].items()}
    torch.save(float32, tmp_path / "other" / tokens.sft.name)
    with pytest.raises(SystemExit, match="holds another model"):
        tokens.keep_sft(module.MODELS / "libero_object_seed0_sft_protocol_tokens.pt")
    assert tokens.model_dtype == "float16" and module.Campaign(module.parse_args(
        ["--suite", "object", "--seed", "0"])).model_dtype == "float32"
    commands = []
    module.run = lambda command, *rest: commands.append(command) or 0
    tokens.train_rl()
    assert module.TOKENS_GRPO_CONFIG in commands[-1] and "policy.kwargs.head=tokens" in commands[-1]
    rft = module.Campaign(module.parse_args(["--suite", "object", "--seed", "0", "--head", "tokens", "--method", "rft",
                                             "--state", str(tmp_path)]))
    (tmp_path / "demos" / "meta").mkdir(parents=True)
    (tmp_path / "sft.txt").write_text("experiments/libero_miniature/models/libero_object_seed0_sft_protocol_tokens.pt\n")
    rft.train_rl()
    assert commands[-1][1] == "trainers/rft.py" and "policy.kwargs.head=tokens" in commands[-1]
    flags = " ".join(commands[-1])
    assert "--samples-per-start 1 --temperature 1.6 --hold-entropy" in flags and "--std" not in flags
    # --method ppo: the comparison, on the same SFT and starts, token GRPO s3's env steps as PPO's decisions
    ppo = module.Campaign(module.parse_args(["--suite", "object", "--seed", "0", "--head", "tokens", "--method", "ppo",
                                             "--state", str(tmp_path)]))
    ppo.train_rl()
    assert commands[-1][1] == "trainers/ppo.py" and module.RL_CONFIGS["ppo"] in commands[-1]
    assert {"total_timesteps=50789", "env.kwargs.init_states=0-39", "policy.kwargs.head=tokens"} <= set(commands[-1])
    import yaml

    ppo_config = yaml.safe_load((module.ROOT / module.RL_CONFIGS["ppo"]).read_text())
    assert {"name": "ActionChunk", "kwargs": {"chunk_size": module.CHUNK}} in ppo_config["env"]["wrappers"]
    assert ppo.variant == "protocol_tokens" and ppo.eval_dir("rl", "train", "greedy").name == "ppo_train_greedy"
    with pytest.raises(SystemExit):
        module.parse_args(["--suite", "object", "--seed", "0", "--method", "ppo"])  # the Gaussian has no PPO config
