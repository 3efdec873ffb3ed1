"""``trainers/eval.py --ood``: the OOD table of one checkpoint, end to end on a real ManiSkill env.

The checkpoints are built here, in the trainers' checkpoint format, so the tests need no training run: an untrained
tiny CNN policy for PushCube images (64 px, main camera) where the rows perturb what the policy sees, and an
untrained tiny MLP for PushCube's state (nothing rendered) where only the sampling is checked.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from vla_gym.core import schema
from vla_gym.trainers.eval import main as eval_main
from vla_gym.trainers.evaluation.ood import (
    Row,
    libero_pro_rows,
    observes_images,
    ood_markdown,
    ood_report,
    parse_rows,
    run_ood,
)
from vla_gym.trainers.policies import make_policy
from vla_gym.trainers.runtime.config import config_from_dict

ROOT = pathlib.Path(__file__).resolve().parents[1]

POLICY_KWARGS = {"image_features": 16, "hidden_sizes": [16], "text_dim": 8}


def tiny_checkpoint(path, chunk_size: int | None = None):
    """An untrained tiny CNN checkpoint for PushCube images; ``chunk_size``: trained behind ``ActionChunk``."""
    wrappers = [{"name": "ActionChunk", "kwargs": {"chunk_size": chunk_size}}] if chunk_size else []
    cfg = config_from_dict({
        "env": {"id": "VLA/ManiSkill-PushCube-v0", "num_envs": 1, "wrappers": wrappers,
                "kwargs": {"cameras": ["main"], "image_size": 64, "max_episode_steps": 4}},
        "policy": {"name": "cnn", "kwargs": POLICY_KWARGS},
    })
    observation_space = schema.observation_space(("main",), (64, 64), 8)
    action_space = schema.action_space(7)
    if chunk_size:
        action_space = gym.spaces.Box(-1.0, 1.0, (chunk_size, 7), np.float32)
    policy = make_policy("cnn", observation_space, action_space, **POLICY_KWARGS)
    torch.save({"config": dataclasses.asdict(cfg), "policy": policy.state_dict(), "policy_name": "cnn",
                "policy_kwargs": POLICY_KWARGS, "observation_space": observation_space,
                "action_space": action_space}, path)
    return path


#: PushCube's state vector in obs_mode="state" (ManiSkill's own: the checkpoint's contract is checked against it)
PUSHCUBE_STATE_DIM = 35


def state_checkpoint(path, chunk_size: int = 2):
    """An untrained tiny MLP checkpoint for PushCube's state (no camera: nothing rendered), behind ``ActionChunk``."""
    kwargs = {"hidden_sizes": [16]}
    cfg = config_from_dict({
        "env": {"id": "VLA/ManiSkill-PushCube-v0", "num_envs": 1,
                "wrappers": [{"name": "ActionChunk", "kwargs": {"chunk_size": chunk_size}}],
                "kwargs": {"obs_mode": "state", "max_episode_steps": 4}},
        "policy": {"name": "mlp", "kwargs": kwargs},
    })
    observation_space = schema.observation_space((), (64, 64), PUSHCUBE_STATE_DIM)
    action_space = gym.spaces.Box(-1.0, 1.0, (chunk_size, 7), np.float32)
    policy = make_policy("mlp", observation_space, action_space, **kwargs)
    torch.save({"config": dataclasses.asdict(cfg), "policy": policy.state_dict(), "policy_name": "mlp",
                "policy_kwargs": kwargs, "observation_space": observation_space, "action_space": action_space}, path)
    return path


def test_parse_rows():
    assert [r.kind for r in parse_rows("all")] == ["lighting", "background_color", "camera_pose", "image_noise",
                                                   "paraphrase", "robot_pose", "object_pose", "action_noise",
                                                   "action_delay"]
    rows = parse_rows("lighting=0.8, paraphrase")
    assert rows == [Row("lighting", 0.8), Row("paraphrase")] and rows[0].name == "lighting-0.8"
    for bad, words in [("lightning", "did you mean lighting"), ("lighting=x", "must be a number"),
                       ("", "at least one"), ("paraphrase,paraphrase", "named twice")]:
        with pytest.raises(ValueError, match=words):
            parse_rows(bad)


def test_table_and_state_only_policies(tmp_path):
    """The table's arithmetic, and vision rows left out for a policy that sees no images (no simulator)."""
    rates = {"ind": 1.0, "action_noise": 0.5, "action_delay": 0.0, "paraphrase": 0.75}
    played = []

    def evaluate(env_cfg, directory, header):
        played.append(directory.name)
        return {"overall": {"episodes": 4, "success_rate": rates[directory.name], "mean_length": 10.0}}

    env_cfg = config_from_dict({}).env
    assert not observes_images({"obs_mode": "state"}) and observes_images({})
    report = run_ood(evaluate, env_cfg, parse_rows("lighting,paraphrase,action_noise,action_delay"), tmp_path, "t",
                     sees_images=False)
    assert played == ["ind", "paraphrase", "action_noise", "action_delay"] and report["skipped"] == ["lighting"]
    assert report["categories"] == {"semantic": 0.75, "execution": 0.25} and report["ood_average"] == 0.5
    table = (tmp_path / "ood.md").read_text()
    # each rate with its 95 % Wilson interval and episodes; a category mean's over its rows' episodes
    assert "| 100.0 [51.0, 100.0] n=4 | n/a | 75.0 [30.1, 95.4] n=4 | 25.0 [7.1, 59.1] n=8 | 50.0 [24.3, 75.7] n=12 |" \
        in table
    assert "| action_delay | execution | 2 | 4 | 0.0 | [0.0, 49.0] | -100.0 |" in table
    assert "| none (IND) | - | - | 4 | 100.0 | [51.0, 100.0] | - | - |" in table
    assert report["ind_ci95"] == [pytest.approx(0.5101, abs=1e-4), 1.0] and report["ood_episodes"] == 12
    assert report["categories_episodes"] == {"semantic": 4, "execution": 8}
    assert report["categories_ci95"]["semantic"] == report["rows"][0]["ci95"] and report["rows"][0]["successes"] == 3
    assert "Not evaluated (the policy sees no images): lighting." in table
    assert json.loads((tmp_path / "ood.json").read_text()) == report
    no_success = ood_report({Row(): {"overall": {"episodes": 1, "success_rate": math.nan, "mean_length": 1.0}}}, "t")
    assert "| n/a | n/a | n/a | n/a | n/a |" in ood_markdown(no_success)  # envs that report no success


def test_a_killed_report_resumes_at_its_row(tmp_path):
    """Rows finished with the same settings are kept; a row that failed, or other settings, play again."""
    played = []

    def evaluate(env_cfg, directory, header):
        played.append(directory.name)
        if directory.name == "paraphrase" and played.count("paraphrase") == 1:
            raise KeyboardInterrupt  # the run is killed in its third row
        return {"overall": {"episodes": 2, "success_rate": 0.5, "mean_length": 10.0}}

    env_cfg = config_from_dict({}).env
    rows = parse_rows("lighting,paraphrase,action_noise")
    settings = {"checkpoint": "a.pt", "episodes_per_task": 2}
    with pytest.raises(KeyboardInterrupt):
        run_ood(evaluate, env_cfg, rows, tmp_path, "t", sees_images=True, settings=settings)
    report = run_ood(evaluate, env_cfg, rows, tmp_path, "t", sees_images=True, settings=settings)
    assert played == ["ind", "lighting", "paraphrase", "paraphrase", "action_noise"]
    assert [r["perturbation"] for r in report["rows"]] == ["lighting", "paraphrase", "action_noise"]
    run_ood(evaluate, env_cfg, rows, tmp_path, "t", sees_images=True, settings=settings)  # all kept
    assert len(played) == 5
    run_ood(evaluate, env_cfg, rows[:1], tmp_path, "t", sees_images=True, settings={**settings, "seed": 1})
    assert played[5:] == ["ind", "lighting"]  # other settings: played anew
    run_ood(evaluate, env_cfg, parse_rows("lighting=0.9"), tmp_path, "t", sees_images=True, settings={**settings, "seed": 1})
    assert played[7:] == ["lighting-0.9"]


def resume_worker(out: pathlib.Path) -> None:
    """Run as a torchrun worker (below): each rank writes into its own directory, as ranks on nodes that share
    no filesystem do, and plays its rows through a collective, as eval.py's ranks do."""
    from vla_gym.trainers.runtime.distributed import Distributed

    dist = Distributed.from_env("cpu", timeout_s=60)  # a rank left waiting fails in a minute instead of hanging
    played = []

    def evaluate(env_cfg, directory, header):
        played.append(directory.name)
        dist.gather_objects(directory.name)
        return {"overall": {"episodes": 2, "success_rate": 0.5, "mean_length": 3.0}} if dist.is_main else None

    rows = parse_rows("lighting,paraphrase")
    for attempt in range(2):  # the second run finds rank 0's rows finished, rank 1's directory empty
        run_ood(evaluate, config_from_dict({}).env, rows, out / f"rank{dist.rank}", "t", sees_images=True,
                settings={"checkpoint": "a.pt"}, dist=dist)
    (out / f"played{dist.rank}.json").write_text(json.dumps(played))
    dist.close()


def test_ranks_resume_the_same_rows_under_torchrun(tmp_path):
    """Rank 0 decides which rows are kept, for every rank: otherwise rank 1 would play a row alone and wait."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from test_torchrun import check, torchrun

    check(torchrun(__file__, str(tmp_path), timeout=300))
    for rank in (0, 1):
        assert json.loads((tmp_path / f"played{rank}.json").read_text()) == ["ind", "lighting", "paraphrase"]
    assert (tmp_path / "rank0" / "ood.json").is_file() and not (tmp_path / "rank1" / "ood.json").exists()


def test_libero_pro_rows_have_their_own_table(tmp_path):
    """--libero-pro: a row per LIBERO-PRO suite (env kwarg perturbation=...), apart from the seeded rows."""
    configs = {}

    def evaluate(env_cfg, directory, header):
        configs[directory.name] = env_cfg
        return {"overall": {"episodes": 2, "success_rate": 0.5, "mean_length": 10.0}}

    env_cfg = config_from_dict({"env": {"id": "VLA/LiberoObject-v0", "kwargs": {"cameras": ["main"]}}}).env
    rows = parse_rows("action_noise") + libero_pro_rows("VLA/LiberoObject-v0")
    report = run_ood(evaluate, env_cfg, rows, tmp_path, "t", sees_images=True)
    assert configs["libero_pro-swap"].kwargs == {"cameras": ["main"], "perturbation": "swap"}
    assert configs["action_noise"].wrappers[0] == {"name": "Perturb", "kwargs": {"kind": "action_noise", "strength": None}}
    assert report["categories"] == {"execution": 0.5}  # the seeded rows only
    assert {r["category"] for r in report["libero_pro"]["rows"]} == {"vision", "semantic", "execution"}
    assert "## LIBERO-PRO suites" in (tmp_path / "ood.md").read_text()
    with pytest.raises(ValueError, match="needs a checkpoint trained on a LIBERO suite"):
        libero_pro_rows("VLA/ManiSkill-PushCube-v0")


@pytest.fixture(scope="module")
def maniskill_renderer():
    """A SAPIEN render system on ManiSkill's CPU render device, alive for the module. Each OOD row builds and closes
    its own env; while any render system lives, the renderer keeps its compiled pipelines, so only the first scene
    pays them (about 7 s of CPU on lavapipe) instead of every row's. The envs are built and rendered as ever."""
    pytest.importorskip("mani_skill")
    import sapien

    system = sapien.render.RenderSystem(sapien.Device("cpu"))
    yield system
    del system


#: (perturbation, strength, row directory, category) of the end-to-end OOD rows
OOD_ROWS = {"camera_pose": ("camera_pose", 0.03, "camera_pose", "vision"),
            "paraphrase": ("paraphrase", 1.0, "paraphrase", "semantic"),
            "action_noise=0.3": ("action_noise", 0.3, "action_noise-0.3", "execution")}


@pytest.mark.parametrize("rows", [
    ["camera_pose", "action_noise=0.3"],
    pytest.param(["camera_pose", "paraphrase", "action_noise=0.3"], marks=pytest.mark.slow),
], ids=["vision-execution", "one-per-category"])
def test_ood_cli_end_to_end(tmp_path, capsys, rows, maniskill_renderer):
    """One command: IND + one perturbation per category (the semantic row in the ``slow`` tier: every row builds
    its own ManiSkill scene, and a scene's first frame costs seconds of shader compiling on a CPU), one episode
    each, a table, a json and a video per row; the policy acts in chunks (ActionChunk above the row's Perturb, as in
    the LIBERO configs)."""
    checkpoint = tiny_checkpoint(tmp_path / "ckpt.pt", chunk_size=2)
    out = tmp_path / "report"
    command = ["--checkpoint", str(checkpoint), "--ood", ",".join(rows), "--episodes-per-task", "1", "--out", str(out),
               "--device", "cpu"]
    assert eval_main(command) == 0
    printed = capsys.readouterr().out
    assert "| IND | Vision | Semantic | Execution | OOD avg |" in printed and f"OOD report: {out / 'ood.md'}" in printed
    report = json.loads((out / "ood.json").read_text())
    expected = [OOD_ROWS[row] for row in rows]
    assert [(r["perturbation"], r["strength"], r["episodes"]) for r in report["rows"]] == [
        (kind, strength, 1) for kind, strength, _, _ in expected]
    assert set(report["categories"]) == {category for *_, category in expected}
    directories = ["ind", *(directory for _, _, directory, _ in expected)]
    for row in directories:
        assert (out / row / "eval.json").is_file() and list((out / row / "videos").glob("*.mp4")), row
    episodes = json.loads((out / "ind" / "eval.json").read_text())["episodes"]
    for row in directories[1:]:
        perturbed = json.loads((out / row / "eval.json").read_text())["episodes"]
        assert [e["spec"] for e in episodes] == [e["spec"] for e in perturbed], row  # the same episodes in every row
    # the same command again (e.g. after a kill): every finished row is kept, nothing is played
    assert eval_main(command) == 0
    printed = capsys.readouterr().out
    assert printed.count("kept from an earlier run") == len(directories) and "eval.md, " not in printed  # none played
    again = json.loads((out / "ood.json").read_text())
    assert again.pop("receipt")["checkpoint"] == report.pop("receipt")["checkpoint"]  # a new receipt, same model
    assert again == report


def test_ood_cli_bad_list_exits_2(tmp_path, capsys):
    checkpoint = tiny_checkpoint(tmp_path / "ckpt.pt")
    assert eval_main(["--checkpoint", str(checkpoint), "--ood", "lightning"]) == 2
    assert "--ood: unknown perturbation 'lightning' (did you mean lighting?)" in capsys.readouterr().err


def test_compare_script_puts_reports_side_by_side_on_common_rows(tmp_path, capsys):
    """experiments/libero_plus_ood/compare_ood.py: before/after RL on the rows both reports have (one was cut short)."""
    script = ROOT / "experiments" / "libero_plus_ood" / "compare_ood.py"

    def compare(*args):
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)

    def report(directory, rates):
        def evaluate(env_cfg, row_directory, header):
            return {"overall": {"episodes": 10, "success_rate": rates[row_directory.name], "mean_length": 5.0}}
        run_ood(evaluate, config_from_dict({}).env, parse_rows(",".join(k for k in rates if k != "ind")),
                directory, "t", sees_images=True)
        return directory

    before = report(tmp_path / "sft", {"ind": 0.7, "lighting": 0.1, "paraphrase": 0.6, "action_noise": 0.4})
    after = report(tmp_path / "grpo", {"ind": 0.8, "lighting": 0.2, "paraphrase": 0.8})  # no action_noise row
    done = compare(str(before), str(after / "ood.json"), "--labels", "SFT", "SFT + GRPO", "--out", str(tmp_path / "cmp.md"))
    assert done.returncode == 0, done.stderr
    table = done.stdout
    assert table == (tmp_path / "cmp.md").read_text()
    # each success with its 95 % Wilson interval; OOD avg over lighting and paraphrase only (their 20 episodes)
    assert "| SFT | 70.0 [39.7, 89.2] n=10 | 10.0 [1.8, 40.4] n=10 | 60.0 [31.3, 83.2] n=10 | n/a | " \
           "35.0 [18.1, 56.7] n=20 |" in table
    assert "| SFT + GRPO | 80.0 [49.0, 94.3] n=10 | 20.0 [5.7, 51.0] n=10 | " in table
    assert "| paraphrase | semantic | 1 | 60.0 % [31.3, 83.2] | 80.0 % [49.0, 94.3] | +20.0 |" in table
    assert "action_noise" not in table
    spec = importlib.util.spec_from_file_location("compare_ood", script)  # the rest in-process
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([str(before), str(tmp_path / "missing")]) == 2
    assert "not found" in capsys.readouterr().err


@pytest.mark.quick
def test_libero_plus_ood_readme_table_equals_its_json(tmp_path):
    """experiments/libero_plus_ood/table.py readme --check: the study's README table is what results.json renders;
    a changed result is caught, and ``readme`` writes it."""
    study = ROOT / "experiments" / "libero_plus_ood"
    spec = importlib.util.spec_from_file_location("libero_plus_ood_table", study / "table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    assert table.main(["readme", "--check"]) == 0
    report = json.loads((study / "results.json").read_text())
    row = report["libero_plus"]["rows"][0]
    row.update(successes=5, success_rate=0.5)
    (tmp_path / "results.json").write_text(json.dumps(report))
    readme = tmp_path / "README.md"
    readme.write_text((study / "README.md").read_text())
    args = ["--results", str(tmp_path / "results.json"), "--readme", str(readme)]
    with pytest.raises(SystemExit, match="differs"):
        table.main(["readme", *args, "--check"])
    assert table.main(["readme", *args]) == 0
    assert table.main(["readme", *args, "--check"]) == 0
    assert f"| {row['perturbation']} | {row['category']} | - | 10 | 50.0 % [23.7, 76.3] | -30.0 |" in readme.read_text()


if __name__ == "__main__":  # the torchrun worker of test_ranks_resume_the_same_rows_under_torchrun
    resume_worker(pathlib.Path(sys.argv[1]))


def test_eval_samples_with_the_noise_and_std_asked_for(tmp_path, capsys):
    """``--stochastic --noise chunk --std S``: the exploration noise of an RL run, measured without training."""
    checkpoint = state_checkpoint(tmp_path / "ckpt.pt", chunk_size=2)
    out = tmp_path / "sampled"
    assert eval_main(["--checkpoint", str(checkpoint), "--episodes-per-task", "1", "--stochastic", "--noise", "chunk",
                      "--std", "0.05", "--out", str(out), "--device", "cpu"]) == 0
    assert json.loads((out / "eval.json").read_text())["episodes"]
    assert eval_main(["--checkpoint", str(checkpoint), "--std", "0.05"]) == 2
    assert "--std, --noise and --temperature set how actions are sampled: add --stochastic" in capsys.readouterr().err
    assert eval_main(["--checkpoint", str(checkpoint), "--stochastic", "--temperature", "1.6"]) == 2
    assert "samples with a std, not at a temperature" in capsys.readouterr().err  # a Gaussian policy


def test_noise_sweep_script_evaluates_each_setting_once_and_writes_its_rows(tmp_path, capsys):
    """experiments/noise_sweep/sweep.py (its short form, on the state checkpoint): a greedy row and one per
    SHAPE:STD, each a trainers/eval.py process; a second run (in-process) reads them back."""
    checkpoint = state_checkpoint(tmp_path / "ckpt.pt", chunk_size=2)
    command = [sys.executable, "experiments/noise_sweep/sweep.py", "--checkpoint", str(checkpoint), "--settings",
               "chunk:0.05", "--out", str(tmp_path / "noise"), "--json", str(tmp_path / "noise.json"), "--",
               "--episodes-per-task", "1", "--device", "cpu"]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count("running:") == 2
    rows = json.loads((tmp_path / "noise.json").read_text())["rows"]
    assert [(r["noise"], r["std"], r["episodes"]) for r in rows] == [("greedy", 0.0, 1), ("chunk", 0.05, 1)]
    spec = importlib.util.spec_from_file_location("noise_sweep", ROOT / "experiments" / "noise_sweep" / "sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    assert sweep.main(command[2:]) == 0
    assert "running:" not in capsys.readouterr().out  # both read back, nothing played
    with pytest.raises(SystemExit) as bad:
        sweep.main([*command[2:5], "chunky:0.1", *command[6:]])
    assert bad.value.code == 2 and "write SHAPE:STD" in capsys.readouterr().err


@pytest.mark.quick
def test_noise_sweep_readme_table_equals_its_json():
    """experiments/noise_sweep/README.md's table = its results.json (``sweep.py readme --check``)."""
    spec = importlib.util.spec_from_file_location("noise_sweep", ROOT / "experiments" / "noise_sweep" / "sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    assert sweep.main(["readme", "--check"]) == 0, "run: python experiments/noise_sweep/sweep.py readme"
