"""experiments/libero_miniature/table.py: a measured SFT -> RL row into the study's results.json, and the table.

The inputs are laid out as trainers/eval.py and a trainer write them (eval.json, checkpoints/, tensorboard/); the
runs themselves are the configs' short forms in tests/test_examples.py and tests/test_sft.py.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import torch

from vla_gym.runtime.receipt import file_sha256

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUDY = ROOT / "experiments" / "libero_miniature"
TABLE = "experiments/libero_miniature/table.py"


def eval_report(path: pathlib.Path, successes: list[bool], init_states=(0, 1)) -> pathlib.Path:
    path.mkdir(parents=True)
    played = [{"spec": {"task_id": t, "init_state_id": i, "seed": 0}, "success": s}
              for (t, i), s in zip([(t, i) for t in range(len(successes) // len(init_states)) for i in init_states],
                                   successes)]
    rate = sum(successes) / len(successes)
    receipt = {"versions": {"mujoco": "3.3.0"}, "env": {"cameras": {"roles": {"main": [128, 128]}, "textures": "linear"}}}
    (path / "eval.json").write_text(json.dumps({"summary": {"overall": {"success_rate": rate}}, "episodes": played,
                                                "receipt": receipt}))
    return path


def training_run(path: pathlib.Path, env_steps: int, elapsed: list[float]) -> pathlib.Path:
    from torch.utils.tensorboard import SummaryWriter

    (path / "checkpoints").mkdir(parents=True)
    torch.save({"counters": {"num_timesteps": env_steps, "num_updates": 2}}, path / "checkpoints" / "ckpt_00000002.pt")
    torch.save({"counters": {}}, path / "sft.pt")
    writer = SummaryWriter(str(path / "tensorboard"))
    for step, value in enumerate(elapsed):
        writer.add_scalar("time/elapsed_s", value, step)
    writer.close()
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, TABLE, *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_a_row_is_written_replaced_and_shown(tmp_path):
    out = tmp_path / "libero_rl.json"
    sft = eval_report(tmp_path / "sft", [True, False, False, False])
    rl = eval_report(tmp_path / "rl", [True, True, True, False])
    # two segments (a resume restarted the clock): 600 s + 300 s = 15 minutes
    rl_run = training_run(tmp_path / "run", 4321, [100, 600, 50, 300])
    common = ["--suite", "object", "--seed", "0", "--method", "grpo", "--split", "train", "--sft-eval", str(sft),
              "--rl-eval", str(rl), "--sft-checkpoint", str(rl_run / "sft.pt"), "--rl-run", str(rl_run), "--out", str(out)]
    run("add", *common, "--mode", "greedy")
    run("add", *common, "--mode", "greedy", "--export-dir", str(tmp_path / "models"))  # the same key replaces its row
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["sft"], row["rl"], row["episodes"], row["tasks"], row["init_states"]) == (0.25, 0.75, 4, [0, 1], [0, 1])
    assert (row["env_steps"], row["wall_minutes"]) == (4321, 15.0)
    assert row["rl_checkpoint"].endswith("libero_object_seed0_grpo.pt")  # the exported copies, trained parameters only
    assert torch.load(row["rl_checkpoint"], weights_only=False) == {}  # (this fake checkpoint holds none of them)
    assert set(row) >= {"suite", "seed", "method", "split", "mode", "commit", "sft_checkpoint"}
    assert ("| object | 0 | grpo | train | greedy | 4 | 25.0 % [4.6, 69.9] | 75.0 % [30.1, 95.4] | +50.0 | 0.5 | 4,321 | "
            "15 | 3.3.0 linear |" in run("table", "--out", str(out)).stdout)  # Wilson intervals, McNemar p, the frames
    run("add", *common, "--mode", "greedy", "--variant", "v3", "--export-dir", str(tmp_path / "models"))
    rows = json.loads(out.read_text())["rows"]  # another config's row stands beside the first
    assert [(r["variant"], pathlib.Path(r["rl_checkpoint"]).name) for r in rows] == [
        ("", "libero_object_seed0_grpo.pt"), ("v3", "libero_object_seed0_grpo_v3.pt")]
    assert "| object | 0 | grpo v3 | train | greedy |" in run("table", "--out", str(out)).stdout


def test_a_token_campaign_exports_its_rl_model_in_half_precision(tmp_path):
    """``add --rl-dtype float16`` (campaign.py's token campaigns): the RL model's parameters are stored in float16,
    the SFT model it started from is exported as it is."""
    rl_run = training_run(tmp_path / "run", 100, [10])
    weights = {"w": torch.linspace(0, 1, 1000)}
    torch.save({"counters": {"num_timesteps": 100}, "policy": weights, "optimizer": {}},
               rl_run / "checkpoints" / "ckpt_00000002.pt")
    torch.save({"policy": weights}, rl_run / "sft.pt")
    run("add", "--suite", "object", "--seed", "0", "--method", "grpo", "--split", "train", "--mode", "greedy",
        "--sft-eval", str(eval_report(tmp_path / "sft", [True, False])), "--rl-eval",
        str(eval_report(tmp_path / "rl", [True, True])), "--sft-checkpoint", str(rl_run / "sft.pt"), "--rl-run",
        str(rl_run), "--out", str(tmp_path / "rows.json"), "--export-dir", str(tmp_path / "models"),
        "--variant", "tokens", "--rl-dtype", "float16")
    [row] = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert torch.load(row["rl_checkpoint"], weights_only=False)["policy"]["w"].dtype == torch.float16
    assert torch.load(row["sft_checkpoint"], weights_only=False)["policy"]["w"].dtype == torch.float32


def replayed_report(path: pathlib.Path, checkpoint: str, successes: list[bool], deterministic: bool = True):
    report = eval_report(path, successes)
    data = json.loads((report / "eval.json").read_text())
    (report / "eval.json").write_text(json.dumps({**data, "settings": {"checkpoint": checkpoint,
                                                                       "deterministic": deterministic}}))
    return report


def test_a_replay_compares_a_kept_model_with_the_rows_that_name_it(tmp_path):
    """``replay``: a re-evaluation of a model file against every row naming it on the same starts and mode (rows
    sharing one report of it compare once), ``--record`` keeps it, ``readme`` renders it; other episodes, another
    mode or a file changed since the report are refused."""
    rl_run = training_run(tmp_path / "run", 100, [10])
    torch.save({"counters": {"num_timesteps": 100}, "policy": {"w": torch.linspace(0, 1, 10)}},
               rl_run / "checkpoints" / "ckpt_00000002.pt")
    torch.save({"policy": {"w": torch.zeros(10)}}, rl_run / "sft.pt")
    out = tmp_path / "rows.json"
    for method in ("grpo", "rft"):  # one SFT report behind two methods' rows
        run("add", "--suite", "object", "--seed", "0", "--method", method, "--split", "train", "--mode", "greedy",
            "--sft-eval", str(eval_report(tmp_path / f"sft_{method}", [True, False])), "--rl-eval",
            str(eval_report(tmp_path / f"rl_{method}", [True, True])), "--sft-checkpoint", str(rl_run / "sft.pt"),
            "--rl-run", str(rl_run), "--out", str(out), "--export-dir", str(tmp_path / "models"), "--rl-dtype", "float16")
    rows = json.loads(out.read_text())["rows"]
    sft, rl = rows[0]["sft_checkpoint"], rows[0]["rl_checkpoint"]
    shown = run("replay", "--eval", str(replayed_report(tmp_path / "replay_sft", sft, [True, True])), "--record",
                "--out", str(out)).stdout
    assert "| float32 | train | greedy | object 0 grpo train greedy (sft), object 0 rft train greedy (sft) |" in shown
    run("replay", "--eval", str(replayed_report(tmp_path / "replay_rl", rl, [True, False])), "--record", "--out", str(out))
    replays = json.loads(out.read_text())["replays"]
    assert [(r["dtype"], r["now"], [(row["then"], row["differ"]) for row in r["rows"]]) for r in replays] == [
        ("float32", 1.0, [(0.5, 1)]), ("float16", 0.5, [(1.0, 1)])]  # the two RL exports are one file, one report
    assert [r["sha256"] for r in replays] == [file_sha256(ROOT / sft), file_sha256(ROOT / rl)]  # which file played
    readme = tmp_path / "README.md"
    readme.write_text("<!-- results:begin -->\n<!-- results:end -->\n<!-- replays:begin -->\n<!-- replays:end -->\n")
    check = [sys.executable, TABLE, "readme", "--readme", str(readme), "--out", str(out), "--check"]
    stale = subprocess.run(check, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert stale.returncode != 0 and "results and replays block differs" in stale.stderr
    run("readme", "--readme", str(readme), "--out", str(out))
    assert "| 1 of 2 | 1 |" in readme.read_text() and subprocess.run(check, cwd=ROOT, timeout=300).returncode == 0
    for refused, why in ((replayed_report(tmp_path / "sampled", rl, [True, False], deterministic=False), "no row names"),
                         (replayed_report(tmp_path / "other", str(rl_run / "sft.pt"), [True, False]), "no row names")):
        result = subprocess.run([sys.executable, TABLE, "replay", "--eval", str(refused), "--out", str(out)], cwd=ROOT,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode != 0 and why in result.stderr
    changed = replayed_report(tmp_path / "changed", rl, [True, False])
    data = json.loads((changed / "eval.json").read_text())
    (changed / "eval.json").write_text(json.dumps({**data, "receipt": {**data["receipt"],
                                                                       "checkpoint": {"sha256": "0" * 64}}}))
    result = subprocess.run([sys.executable, TABLE, "replay", "--eval", str(changed), "--out", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "changed since" in result.stderr


def test_reports_of_different_episodes_are_refused(tmp_path):
    sft = eval_report(tmp_path / "sft", [True, False])
    rl = eval_report(tmp_path / "rl", [True, False], init_states=(5, 6))
    result = subprocess.run([sys.executable, TABLE, "add", "--suite", "object", "--seed", "0",
                             "--method", "grpo", "--split", "heldout", "--mode", "greedy", "--sft-eval", str(sft),
                             "--rl-eval", str(rl), "--sft-checkpoint", "x", "--rl-run", str(tmp_path),
                             "--out", str(tmp_path / "r.json")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "played different episodes" in result.stderr


def test_an_rft_run_counts_its_rounds_sampling_and_names_the_sft_variant(tmp_path):
    out = tmp_path / "libero_rl.json"
    sft = eval_report(tmp_path / "sft", [True, False, False, False])
    rl = eval_report(tmp_path / "rl", [True, True, False, False])
    rft = tmp_path / "rft"
    for r in (1, 2):
        (rft / f"round_{r}" / "sft").mkdir(parents=True)
        torch.save({"counters": {}}, rft / f"round_{r}" / "sft" / "final.pt")
    rows = [{"round": 0, "greedy": 0.25}, {"round": 1, "env_steps": 1000, "train_minutes": 4.0},
            {"round": 2, "env_steps": 500, "train_minutes": 2.5}]
    (rft / "rft.json").write_text(json.dumps({"rows": rows}))
    common = ["--suite", "object", "--seed", "0", "--method", "rft", "--split", "train", "--mode", "greedy",
              "--sft-eval", str(sft), "--rl-eval", str(rl), "--sft-checkpoint", str(rft / "round_1" / "sft" / "final.pt"),
              "--rl-run", str(rft), "--out", str(out), "--export-dir", str(tmp_path / "models"), "--sft-variant", "3demos"]
    run("add", *common, "--rl-checkpoint", str(rft / "round_1" / "sft" / "final.pt"))
    assert [(r["env_steps"], r["wall_minutes"]) for r in json.loads(out.read_text())["rows"]] == [(1000, 4.0)]
    run("add", *common)  # the newest round by default: both rounds' sampling and fitting
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["method"], row["env_steps"], row["wall_minutes"]) == ("rft", 1500, 6.5)
    assert pathlib.Path(row["sft_checkpoint"]).name == "libero_object_seed0_sft_3demos.pt"
    assert pathlib.Path(row["rl_checkpoint"]).name == "libero_object_seed0_rft.pt"


def test_reports_on_other_frames_are_refused(tmp_path):
    """An SFT measured on MuJoCo 3.17's darker frames cannot stand beside an RL model measured on LIBERO's own."""
    sft = eval_report(tmp_path / "sft", [True, False])
    rl = eval_report(tmp_path / "rl", [True, False])
    report = json.loads((sft / "eval.json").read_text())
    report["receipt"] = {"versions": {"mujoco": "3.17.0"}, "env": {"cameras": {"roles": {}}}}  # before the setting
    (sft / "eval.json").write_text(json.dumps(report))
    result = subprocess.run([sys.executable, TABLE, "add", "--suite", "object", "--seed", "0",
                             "--method", "grpo", "--split", "heldout", "--mode", "greedy", "--sft-eval", str(sft),
                             "--rl-eval", str(rl), "--sft-checkpoint", "x", "--rl-run", str(tmp_path),
                             "--out", str(tmp_path / "r.json")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "saw other frames (3.17.0 auto against 3.3.0 linear)" in result.stderr


@pytest.mark.quick
def test_docs_show_the_campaign_rows():
    """experiments/libero_miniature/README.md shows every campaign row (`grpo protocol`, `residual`, `rft protocol`,
    and their camera variants such as `residual wrist`) of the study's results.json as the script prints it (the
    top-level README's short lines are scripts/render_results.py's, checked by tests/test_layout.py)."""
    campaign = ("| grpo protocol", "| residual", "| rft protocol")
    lines = [line for line in run("table").stdout.splitlines() if any(method in line for method in campaign)]
    docs = (STUDY / "README.md").read_text()
    assert lines
    for line in lines:
        assert line in docs, f"experiments/libero_miniature/README.md lacks the measured row {line}"


def test_every_committed_row_names_models_that_are_in_the_repository():
    """Issue 28's rows carry their models so anyone can re-evaluate them; a row whose models were lost says so."""
    rows = json.loads((STUDY / "results.json").read_text())["rows"]
    missing = [(row["variant"], row["split"], row["mode"], path) for row in rows if not row.get("models_lost")
               for path in (row["sft_checkpoint"], row["rl_checkpoint"]) if path and not (ROOT / path).is_file()]
    assert not missing, f"rows point at models that are not committed: {missing}"


def test_the_readme_shows_the_results_json_table():
    """The study's README holds the table that `table.py readme` renders from results.json (`--check` only compares)."""
    result = run("readme", "--check")
    assert "differs" not in result.stderr


def test_the_readme_shows_the_signal_json_table():
    """The study's README holds the mixed-group table that `group_signal.py --readme` renders from
    results_signal.json, and every row's model is in the repository."""
    result = subprocess.run([sys.executable, str(STUDY / "group_signal.py"), "--readme", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, "run: python experiments/libero_miniature/group_signal.py --readme"
    rows = json.loads((STUDY / "results_signal.json").read_text())["rows"]
    assert all((ROOT / row["checkpoint"]).is_file() for row in rows)


def test_a_row_records_the_action_head_and_the_sampling_temperature(tmp_path):
    """``head`` from the evaluated checkpoint's policy kwargs, ``temperature`` from the report's settings (or the
    checkpoint's own when the evaluation did not set one), for a sampled evaluation of a token head only."""
    sys.path.insert(0, str(STUDY))
    try:
        import table
    finally:
        sys.path.remove(str(STUDY))

    def report(name: str, kwargs: dict, **settings) -> pathlib.Path:
        checkpoint = tmp_path / f"{name}.pt"
        torch.save({"policy_kwargs": kwargs}, checkpoint)
        path = eval_report(tmp_path / name, [True, False])
        data = json.loads((path / "eval.json").read_text())
        data["settings"] = {"checkpoint": str(checkpoint), "deterministic": True, **settings}
        (path / "eval.json").write_text(json.dumps(data))
        return path

    assert table.sampling(report("gauss", {})) == {"head": "gaussian", "temperature": None}
    tokens = {"head": "tokens", "temperature": 1.6}
    assert table.sampling(report("greedy", tokens)) == {"head": "tokens", "temperature": None}
    assert table.sampling(report("own", tokens, deterministic=False)) == {"head": "tokens", "temperature": 1.6}
    assert table.sampling(report("set", tokens, deterministic=False, temperature=1.0)) == {"head": "tokens",
                                                                                           "temperature": 1.0}
    assert table.sampling(eval_report(tmp_path / "old", [True, False])) == {}
