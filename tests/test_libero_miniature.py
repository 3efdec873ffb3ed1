"""experiments/libero_miniature/figures.py (the LIBERO miniature's curve and video grids) in a short form.

The inputs are small files laid out as trainers/eval.py and GRPO write them (eval.json + MP4s, a TensorBoard log);
the training runs themselves are the configs' short forms in tests/test_examples.py and tests/test_sft.py.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments" / "libero_miniature"))
from figures import TILE_WIDTH  # noqa: E402


def eval_dir(path: pathlib.Path, successes: list[bool], frames: int) -> pathlib.Path:
    """An eval.py output: one episode with a video per task (and one without, which the grid skips)."""
    import imageio.v2 as imageio

    (path / "videos").mkdir(parents=True)
    episodes = []
    for task, success in enumerate(successes):
        video = path / "videos" / f"episode-{task:04d}.mp4"
        with imageio.get_writer(video, fps=5, codec="libx264", macro_block_size=16, ffmpeg_log_level="error") as w:
            for t in range(frames + task):  # clips of different lengths
                w.append_data(np.full((80, 96, 3), 20 * t % 255, np.uint8))
        episodes.append({"task_id": task, "success": success, "video": str(video)})
        episodes.append({"task_id": task, "success": success, "video": None})
    rate = sum(successes) / len(successes)
    summary = {"overall": {"episodes": len(episodes), "success_rate": rate, "mean_return": rate, "mean_length": 9}}
    (path / "eval.json").write_text(json.dumps({"summary": summary, "episodes": episodes}))
    return path


def test_figures_from_eval_dirs_and_a_grpo_log(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    before = eval_dir(tmp_path / "eval_sft", [True, False, False, False, False, True, False], frames=4)
    after = eval_dir(tmp_path / "eval_grpo", [True, True, False, True, False, True, True], frames=3)
    writer = SummaryWriter(str(tmp_path / "grpo" / "tensorboard"))
    for update, (success, elapsed) in enumerate([(0.2, 60), (0.4, 120), (0.5, 30)]):  # resumed before update 3
        writer.add_scalar("env/success_once", success, (update + 1) * 1000)
        writer.add_scalar("time/elapsed_s", elapsed, (update + 1) * 1000)
    writer.close()
    out = tmp_path / "figures" / "mini"
    result = subprocess.run([sys.executable, "experiments/libero_miniature/figures.py", "--grpo",
                             str(tmp_path / "grpo"),
                             "--before", str(before), "--after", str(after), "--out", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "SFT 0.286 -> GRPO 0.714" in result.stdout
    assert (tmp_path / "figures" / "mini_curve.png").stat().st_size > 0
    table = (tmp_path / "figures" / "mini_curve.md").read_text()
    assert "| 3 | 3000 | 2.5 | 0.500 |" in table  # wall minutes: the resumed part's 30 s after the first's 120 s
    green, red = (40, 170, 60), (200, 40, 40)
    for name, frames, task_1 in (("sft", 4 + 6, red), ("grpo", 3 + 6, green)):
        gif = Image.open(tmp_path / "figures" / f"mini_{name}_grid.gif")
        assert gif.n_frames == frames  # the longest clip (task 6: 6 frames more); shorter ones hold their last
        w = TILE_WIDTH
        assert gif.size == (5 * (w + 6), 2 * (round(80 * w / 96) + 6))  # 5 per row, 2 rows, tiles in a 3 px frame
        first = np.asarray(gif.convert("RGB")).astype(int)
        for x, colour in ((1, green), (w + 7, task_1)):  # tiles' frames: green success, red failure
            assert np.abs(first[1, x] - colour).max() < 12, (name, x, first[1, x])

    curve_only = subprocess.run([sys.executable, "experiments/libero_miniature/figures.py", "--grpo",
                                 str(tmp_path / "grpo"),
                                 "--before", str(before), "--after", str(after), "--out", str(out) + "_curve_only",
                                 "--no-grids"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert curve_only.returncode == 0, curve_only.stderr[-3000:]
    assert (tmp_path / "figures" / "mini_curve_only_curve.png").is_file()
    assert not list((tmp_path / "figures").glob("mini_curve_only_*grid.gif"))  # the campaign's evals have no videos


def test_a_ppo_runs_curve_counts_env_steps(tmp_path):
    """A PPO run's TensorBoard counts decisions: over an ActionChunk env of K = 8 each is 8 env steps on the curve
    (the campaign's ``--method ppo``), while a GRPO run's steps are env steps already."""
    pytest.importorskip("tensorboard")
    import yaml
    from figures import env_steps_per_count, rl_curve
    from torch.utils.tensorboard import SummaryWriter

    config = yaml.safe_load((ROOT / "experiments/libero_miniature/configs/libero_object_miniature_ppo_tokens.yaml")
                            .read_text())
    (tmp_path / "ppo").mkdir()
    (tmp_path / "ppo" / "config.yaml").write_text(yaml.safe_dump(config))
    writer = SummaryWriter(str(tmp_path / "ppo" / "tensorboard"))
    writer.add_scalar("env/success_once", 0.25, 256)
    writer.close()
    assert env_steps_per_count(tmp_path / "ppo") == 8 and env_steps_per_count(tmp_path) == 1
    assert [row["steps"] for row in rl_curve(tmp_path / "ppo")] == [2048]


def test_token_spread_reads_the_committed_token_sft_on_recorded_frames(tmp_path, capsys):
    """experiments/libero_miniature/token_spread.py in short form: the study's token SFT on the frames of a short
    recorded LIBERO episode; a Gaussian model is refused by name."""
    pytest.importorskip("libero")
    pytest.importorskip("pyarrow")
    from short_runs import SHORT_IMAGE_SIZE
    from token_spread import main as token_spread

    from vla_gym.data.record import record_demos

    demos = tmp_path / "demos"
    record_demos("VLA/LiberoObject-v0", demos, episodes_per_task=1, task_ids=[0], keep_failures=True,
                 progress=False, cameras=["main"], image_size=SHORT_IMAGE_SIZE, max_episode_steps=8)
    models = ROOT / "experiments" / "libero_miniature" / "models"
    assert token_spread(["--checkpoint", str(models / "libero_object_seed0_sft_protocol_tokens.pt"), "--dataset",
                         str(demos), "--frames", "4", "--temperatures", "1.0", "1.6", "--json",
                         "--out", str(tmp_path / "spread.json")]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["temperature"] for r in rows] == [1.0, 1.6]
    written = json.loads((tmp_path / "spread.json").read_text())
    assert written["rows"] == rows and written["frames"] == 4
    assert rows[0]["entropy"] < rows[1]["entropy"] and rows[0]["top_mass"]["1"] > rows[1]["top_mass"]["1"]
    with pytest.raises(SystemExit):
        token_spread(["--checkpoint", str(models / "libero_object_seed0_sft_3demos_fitted.pt"), "--dataset",
                      str(demos)])
    assert "no action-token head" in capsys.readouterr().err
