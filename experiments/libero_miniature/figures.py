"""Figures of the LIBERO miniature runs (experiments/libero_miniature/README.md): an RL run's curve and a grid of
evaluation videos.

    python experiments/libero_miniature/figures.py --grpo runs/libero_miniature/grpo \
        --before runs/libero_miniature/eval_sft --after runs/libero_miniature/eval_grpo \
        --out runs/libero_miniature/figures/object
    python experiments/libero_miniature/figures.py --grpo runs/libero_rl_campaign/object_s0/grpo \
        --before runs/libero_rl_campaign/object_s0/evals/sft_train_greedy \
        --after runs/libero_rl_campaign/object_s0/evals/rl_train_greedy \
        --out runs/libero_rl_campaign/object_s0/grpo --no-grids   # a campaign's curve (campaign.py)

writes ``<out>_curve.png`` (success of the RL run's sampled rollouts per round, with the greedy held-out success
before and after as lines), ``<out>_curve.md`` (the same per round, as a Markdown table) and, for each of
``--before`` / ``--after``, ``<out>_<name>_grid.gif``: one evaluation episode per task (the first evaluated
initial state of each task) tiled 5 per row, each tile framed green (success) or red (failure). The evaluation
directories are ``trainers/eval.py --video-episodes N --out DIR`` outputs (``eval.json`` + ``videos/``).
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
from PIL import Image

from vla_gym.runtime.cli_args import script_parser

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _module(path: pathlib.Path, name: str):
    """The script at ``path`` as a module named ``name`` (by path: another folder's module of the same file name,
    such as another study's ``table``, may already be imported)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sft_then_rl():
    """examples/sft_then_rl.py as a module: its TensorBoard curve reader and plot serve here too."""
    return _module(ROOT / "examples" / "sft_then_rl.py", "sft_then_rl")


def overall(eval_dir: pathlib.Path) -> dict:
    return json.loads((eval_dir / "eval.json").read_text())["summary"]["overall"]


def rl_curve(run: pathlib.Path) -> list[dict]:
    """The RL run's curve, ``[{"steps", "env/success_once"}]`` per round: GRPO's and residual RL's from their
    TensorBoard (each round's sampled rollouts), an RFT run's (``trainers/rft.py``: ``rft.json``) from its rounds:
    the greedy success of each round's model on the starts it trains on (round 0: the initial policy, at 0 env
    steps), at the env steps sampled so far and the minutes spent sampling and fitting so far (``minutes``, when
    every round has its ``train_minutes``; the greedy evaluations are measurement, not training, as for GRPO, unless
    ``--keep-greedy-successes`` made them a round's data: then rft.py counts them).

    >>> import tempfile; run = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (run / "rft.json").write_text(json.dumps({"rows": [{"round": 0, "greedy": 0.25}, {"round": 1, "greedy": 0.5,
    ...     "env_steps": 900, "train_minutes": 40.0}, {"round": 2, "greedy": 0.6, "env_steps": 800, "train_minutes": 38.5}]}))
    >>> [(row["steps"], row["minutes"]) for row in rl_curve(run)]
    [(0, 0.0), (900, 40.0), (1700, 78.5)]
    """
    if not (run / "rft.json").is_file():
        per_count = env_steps_per_count(run)
        return with_wall_minutes([dict(row, steps=row["steps"] * per_count) for row in _sft_then_rl().grpo_curve(run)])
    rows = json.loads((run / "rft.json").read_text())["rows"]
    timed = all(row.get("train_minutes") is not None for k, row in enumerate(rows) if row.get("round", k) >= 1)
    curve, steps, minutes = [], 0, 0.0
    for row in rows:
        steps += int(row.get("env_steps") or 0)
        minutes += float(row.get("train_minutes") or 0.0)
        curve.append({"steps": steps, "env/success_once": float(row["greedy"]), **({"minutes": minutes} if timed else {})})
    return curve


def env_steps_per_count(run: pathlib.Path) -> int:
    """Env steps per step of the run's TensorBoard axis: a PPO run counts decisions, K env steps each over an
    ActionChunk env (table.py's budget counts them the same way); GRPO and residual RL count env steps."""
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else {}
    if "ppo" not in (config or {}):
        return 1
    return _module(pathlib.Path(__file__).with_name("table.py"), "libero_miniature_table").chunk_size(config)


def with_wall_minutes(curve: list[dict]) -> list[dict]:
    """``curve`` with ``minutes``: the run's training wall time at each point, from its ``time/elapsed_s``, which
    starts again at 0 when a killed run resumes; the parts are added up (a part's time before its first logged
    point, if any, is not counted)."""
    out, done, last = [], 0.0, 0.0
    for row in curve:
        if "time/elapsed_s" in row:
            if row["time/elapsed_s"] < last:  # a resumed part: its clock starts again
                done += last
            last = row["time/elapsed_s"]
            row = dict(row, minutes=(done + last) / 60)
        out.append(row)
    return out


#: what the curve's points are, by the run's kind (the legend and the table's column)
SAMPLED, RFT_GREEDY = "rollout success (sampled)", "greedy success of the round's model"


def curve_table(curve: list[dict], column: str = SAMPLED, first: int = 1) -> str:
    """Markdown: round | env steps | wall minutes (when every point has them) | ``column`` (a round: one GRPO
    update, one residual round of a few episodes and its gradient steps, or one RFT round of sampling and fitting; an
    RFT curve starts at round ``first`` = 0)."""
    points = [r for r in curve if "env/success_once" in r]
    timed = bool(points) and all("minutes" in r for r in points)
    rows = [f"| round | env steps |{' wall minutes |' if timed else ''} {column} |",
            "|---:|---:|" + ("---:|" if timed else "") + "---:|"]
    for k, row in enumerate(points):
        minutes = f" {row['minutes']:.1f} |" if timed else ""
        rows.append(f"| {k + first} | {row['steps']} |{minutes} {row['env/success_once']:.3f} |")
    return "\n".join(rows) + "\n"


def read_frames(path: str | pathlib.Path) -> list[np.ndarray]:
    import imageio.v2 as imageio

    with imageio.get_reader(str(path)) as reader:
        return [np.asarray(frame) for frame in reader]


def tile(frame: np.ndarray, width: int, success: bool, border: int = 3) -> np.ndarray:
    """``frame`` scaled to ``width`` px wide inside a green (success) or red (failure) border."""
    height = round(frame.shape[0] * width / frame.shape[1])
    small = np.asarray(Image.fromarray(frame).resize((width, height), Image.BILINEAR))
    out = np.empty((height + 2 * border, width + 2 * border, 3), np.uint8)
    out[:] = (40, 170, 60) if success else (200, 40, 40)
    out[border:border + height, border:border + width] = small
    return out


#: GIF size knobs: tile width (px), frames at most (long clips are subsampled), palette colours
TILE_WIDTH, MAX_FRAMES, COLORS = 88, 24, 48


def video_grid(eval_dir: pathlib.Path, out: pathlib.Path, columns: int = 5, width: int = TILE_WIDTH,
               max_frames: int = MAX_FRAMES) -> pathlib.Path:
    """A GIF tiling one recorded episode per task (its first evaluated init state); episodes that ended early
    hold their last frame. Returns ``out``."""
    episodes = json.loads((eval_dir / "eval.json").read_text())["episodes"]
    chosen: dict[int, dict] = {}
    for episode in episodes:
        if episode.get("video") and episode["task_id"] not in chosen:
            chosen[episode["task_id"]] = episode
    if not chosen:
        raise ValueError(f"{eval_dir}: no episode has a video; run trainers/eval.py with --video-episodes N")
    clips = []
    for task in sorted(chosen):
        frames = read_frames(eval_dir / "videos" / pathlib.Path(chosen[task]["video"]).name)
        clips.append([tile(f, width, bool(chosen[task]["success"])) for f in frames])
    length = min(max(len(c) for c in clips), max_frames)
    h, w = clips[0][0].shape[:2]
    rows = -(-len(clips) // columns)
    gif = []
    for t in range(length):
        canvas = np.full((rows * h, columns * w, 3), 255, np.uint8)
        for k, clip in enumerate(clips):
            frame = clip[min(t * len(clip) // length if len(clip) > length else t, len(clip) - 1)]
            r, c = divmod(k, columns)
            canvas[r * h:r * h + frame.shape[0], c * w:c * w + frame.shape[1]] = frame[:h, :w]
        gif.append(Image.fromarray(canvas).convert("P", palette=Image.ADAPTIVE, colors=COLORS))
    out.parent.mkdir(parents=True, exist_ok=True)
    gif[0].save(out, save_all=True, append_images=gif[1:], duration=200, loop=0, optimize=True)
    return out


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--grpo", required=True, help="the RL run directory: its tensorboard/ (GRPO, residual RL) or "
                        "rft.json (RFT) is read")
    parser.add_argument("--method", default="GRPO", help="the RL method's name in the figure (a residual run's "
                        "TensorBoard has the same env/success_once per round)")
    parser.add_argument("--before", required=True, help="trainers/eval.py output of the SFT checkpoint")
    parser.add_argument("--after", required=True, help="trainers/eval.py output of the GRPO checkpoint")
    parser.add_argument("--out", required=True, help="path prefix of the figures")
    parser.add_argument("--no-grids", action="store_true",
                        help="the curve only (evaluations played with --video-episodes 0, as the campaign's)")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    before, after = overall(pathlib.Path(args.before)), overall(pathlib.Path(args.after))
    example = _sft_then_rl()
    curve = rl_curve(pathlib.Path(args.grpo))
    rft = (pathlib.Path(args.grpo) / "rft.json").is_file()
    column = RFT_GREEDY if rft else SAMPLED
    out.parent.mkdir(parents=True, exist_ok=True)
    example.plot_curve(curve, before, after, out.with_name(out.name + "_curve.png"), args.method,
                       label=f"{args.method}: {RFT_GREEDY} on the starts it trains on" if rft else None)
    out.with_name(out.name + "_curve.md").write_text(curve_table(curve, column, first=0 if rft else 1))
    for name, eval_dir in () if args.no_grids else (("sft", args.before), ("grpo", args.after)):
        path = video_grid(pathlib.Path(eval_dir), out.with_name(f"{out.name}_{name}_grid.gif"))
        print(f"{path} ({path.stat().st_size / 1e3:.0f} kB)")
    print(f"SFT {before['success_rate']:.3f} -> {args.method} {after['success_rate']:.3f} over {after['episodes']} episodes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
