"""The LIBERO SFT -> RL table as data: add a measured row to this study's results.json, or render the table.

    python experiments/libero_miniature/table.py add --suite object --seed 0 --method grpo --split train \
        --mode greedy --sft-eval runs/libero_rl/eval_sft_object_s0_train --rl-eval runs/libero_rl/eval_grpo_object_s0_train \
        --sft-checkpoint runs/libero_rl/sft_object_s0/final.pt --rl-run runs/libero_rl/grpo_object_s0
    python experiments/libero_miniature/table.py table            # the Markdown table
    python experiments/libero_miniature/table.py readme [--check] # ... into the study's README (or check it is there)
    python experiments/libero_miniature/table.py replay --eval runs/replay/x --record   # a re-evaluation against its rows

A row is one (suite, seed, method, variant, split, mode): the success of the SFT and the RL checkpoint on the same episodes
(both ``trainers/eval.py`` reports must have played the same (task, init state, seed) list, or the row is refused),
the tasks and init states, the RL run's env steps and wall-clock minutes (summed over its resumed segments, from its
TensorBoard ``time/elapsed_s``; a PPO run's decisions of K-step action chunks count K env steps each, an upper
bound by the unexecuted sub-steps of episode ends), the frames the policies saw (MuJoCo version and texture look,
from the RL report's receipt: ``3.3.0 linear`` is LIBERO's own), the checkpoints and the commit that measured it. Adding a row with the same key
replaces the old one; the file is written atomically. Each row also keeps both reports' per-episode outcomes
(``outcomes``: "0"/"1" per episode in (task, init state, seed) order), so the paired McNemar test can be redone from
the JSON alone, and the RL policy's action ``head`` (``gaussian`` or ``tokens``) with the ``temperature`` a sampled
evaluation of a token head drew at (None otherwise; rows added before the token head have neither key); ``--export-dir`` saves the two models, trained parameters only, where a study keeps the few it names.

``replay`` checks that a kept model still plays as its rows say: a ``trainers/eval.py`` report of one model file (the
row's command, e.g. the held-out greedy one) against every row whose SFT or RL side names that file and played the
same starts in the same mode on the same frames: its success then and now, the episodes whose outcome changed and
the paired McNemar p. ``--record`` keeps the comparison in the JSON's ``replays`` (one per model, split, mode and
temperature, with the file's dtype: an RL model exported in float16 after its rows were measured on the float32
checkpoint, or a model rounded to float16 later, is re-evaluated this way), and ``readme`` renders them in the
README's ``replays`` block.
"""
from __future__ import annotations

import json
import pathlib
import sys

import torch

from vla_gym.runtime.cli_args import script_parser
from vla_gym.runtime.receipt import file_sha256
from vla_gym.trainers.evaluation.stats import mcnemar_outcomes_p, wilson_interval
from vla_gym.trainers.runtime.checkpoint import export_policy, load_checkpoint
from vla_gym.trainers.runtime.results import git_commit, render_block, repo_relative, write_results

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results.json"
README = HERE / "README.md"
KEY = ("suite", "seed", "method", "variant", "split", "mode")


def read_eval(directory: pathlib.Path) -> tuple[float, list[tuple], int]:
    """(success rate, the played (task, init state, seed) list, episodes) of a trainers/eval.py report."""
    data = json.loads((directory / "eval.json").read_text())
    played = sorted((e["spec"]["task_id"], e["spec"]["init_state_id"], e["spec"]["seed"]) for e in data["episodes"])
    return float(data["summary"]["overall"]["success_rate"]), played, len(played)


def starts(played: list[tuple]) -> tuple[list[int], list[int]]:
    """The tasks and init states of a report's played (task, init state, seed) list, as a row records them."""
    return (sorted({task for task, _, _ in played if task is not None}),
            sorted({init for _, init, _ in played if init is not None}))


def outcomes(directory: pathlib.Path) -> str:
    """A report's successes as "0"/"1" per episode, in (task, init state, seed) order: what a paired test needs."""
    episodes = json.loads((directory / "eval.json").read_text())["episodes"]
    ordered = sorted(episodes, key=lambda e: (e["spec"]["task_id"], e["spec"]["init_state_id"], e["spec"]["seed"]))
    return "".join("1" if e["success"] else "0" for e in ordered)


def mcnemar_p(row: dict) -> float | None:
    """The exact McNemar p-value of a row's paired SFT and RL outcomes (None for rows measured without them).

    >>> mcnemar_p({"outcomes": {"sft": "0011", "rl": "1111"}})
    0.5
    """
    if "outcomes" not in row:
        return None
    return mcnemar_outcomes_p(row["outcomes"]["sft"], row["outcomes"]["rl"])


def frames(directory: pathlib.Path) -> str:
    """``"3.3.0 linear"``: the MuJoCo of a report's receipt and how its textures looked (``auto``: MuJoCo >= 3.3.3's
    own sRGB decoding, the only look before the receipts recorded it).

    >>> frames_of({"versions": {"mujoco": "3.17.0"}, "env": {"cameras": {"roles": {}}}})
    '3.17.0 auto'
    """
    return frames_of(json.loads((directory / "eval.json").read_text())["receipt"])


def frames_of(receipt: dict) -> str:
    version = receipt["versions"]["mujoco"]
    look = receipt["env"].get("cameras", {}).get("textures")
    if look is None:
        look = "auto" if tuple(int(p) for p in version.split(".")[:3]) >= (3, 3, 3) else "linear"
    return f"{version} {look}"


def rl_checkpoints(run: pathlib.Path) -> list[pathlib.Path]:
    """A run's checkpoints, oldest first: ``checkpoints/ckpt_*.pt`` (PPO, GRPO) or ``round_R/sft/final.pt`` (RFT)."""
    if (run / "rft.json").is_file():
        return sorted(run.glob("round_*/sft/final.pt"), key=lambda p: int(p.parts[-3].split("_")[1]))
    return sorted((run / "checkpoints").glob("ckpt_*.pt"))


def rft_budget(run: pathlib.Path, checkpoint: pathlib.Path) -> tuple[int, float]:
    """(env steps, minutes) of an RFT run's rounds up to the one that fitted ``checkpoint``: sampled env steps and
    the minutes of sampling and fitting (trainers/rft.py's rft.json rows), not those of its evaluations."""
    last = int(checkpoint.resolve().parts[-3].split("_")[1])
    rows = [r for r in json.loads((run / "rft.json").read_text())["rows"] if 1 <= r["round"] <= last]
    if len(rows) != last:
        raise SystemExit(f"{run}/rft.json has rows for rounds {[r['round'] for r in rows]}, not 1..{last}")
    return sum(r["env_steps"] for r in rows), round(sum(r.get("train_minutes") or 0.0 for r in rows), 1)


def run_budget(run: pathlib.Path, checkpoint: str | None = None) -> tuple[int, float]:
    """(env steps, wall minutes) of a training run up to ``checkpoint`` (default: its newest): the checkpoint's
    counter and the sum over resumed segments of TensorBoard's ``time/elapsed_s`` (it restarts at each resume)
    logged at or before that many env steps; an RFT run's from its rft.json (:func:`rft_budget`)."""
    if (run / "rft.json").is_file():
        checkpoints = rl_checkpoints(run)
        if not checkpoints:
            raise SystemExit(f"{run}: no round_R/sft/final.pt")
        return rft_budget(run, pathlib.Path(checkpoint) if checkpoint else checkpoints[-1])
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    checkpoints = sorted((run / "checkpoints").glob("ckpt_*.pt"))
    if not checkpoints:
        raise SystemExit(f"{run}: no checkpoints/ckpt_*.pt")
    state = torch.load(checkpoint or checkpoints[-1], map_location="cpu", weights_only=False)
    timesteps = int(state["counters"]["num_timesteps"])
    accumulator = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    values = [event.value for event in accumulator.Scalars("time/elapsed_s") if event.step <= timesteps]
    # PPO counts decisions (vector steps of the ActionChunk env), GRPO counts env steps: K env steps per decision
    env_steps = timesteps * chunk_size(state["config"]) if state.get("algo") == "ppo" else timesteps
    total, last = 0.0, 0.0
    for value in values:
        if value < last:  # a resume started a new segment
            total += last
        last = value
    return env_steps, round((total + last) / 60.0, 1)


def chunk_size(config: dict) -> int:
    """K of the run's ActionChunk wrapper (1 without one)."""
    for spec in config["env"].get("wrappers") or []:
        if isinstance(spec, dict) and spec.get("name") == "ActionChunk":
            return int(spec.get("kwargs", {}).get("chunk_size", 1))
    return 1


relative = repo_relative  # the name metaworld_rl_table.py and the rows code use


def load(path: pathlib.Path = RESULTS) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"rows": []}


def sampling(report_dir: pathlib.Path) -> dict:
    """``head`` (the policy's action head: ``gaussian`` or ``tokens``) and ``temperature`` (the token head's sampling
    temperature in a sampled evaluation; None when greedy or Gaussian) of one report's checkpoint and settings ({}
    for a report that does not name its checkpoint)."""
    settings = json.loads((report_dir / "eval.json").read_text()).get("settings") or {}
    if not settings.get("checkpoint"):
        return {}
    kwargs = load_checkpoint(ROOT / settings["checkpoint"]).get("policy_kwargs") or {}
    head = kwargs.get("head", "gaussian")
    temperature = None
    if head == "tokens" and not settings.get("deterministic", True):
        temperature = settings.get("temperature") or kwargs.get("temperature", 1.0)
    return {"head": head, "temperature": temperature}


def key(row: dict) -> tuple:
    return tuple(row.get(k, "") for k in KEY)


def add(args) -> dict:
    sft, sft_played, episodes = read_eval(pathlib.Path(args.sft_eval))
    rl, rl_played, _ = read_eval(pathlib.Path(args.rl_eval))
    if sft_played != rl_played:
        raise SystemExit("the SFT and RL reports played different episodes: evaluate both with the same "
                         "--tasks / --init-states / --seed")
    seen = frames(pathlib.Path(args.rl_eval))
    if frames(pathlib.Path(args.sft_eval)) != seen:
        raise SystemExit(f"the SFT and RL reports saw other frames ({frames(pathlib.Path(args.sft_eval))} against "
                         f"{seen}): evaluate both on the same MuJoCo and texture_colorspace")
    env_steps, minutes = run_budget(pathlib.Path(args.rl_run), args.rl_checkpoint)
    checkpoints = rl_checkpoints(pathlib.Path(args.rl_run))
    sft_checkpoint, rl_checkpoint = args.sft_checkpoint, args.rl_checkpoint or str(checkpoints[-1])
    if args.export_dir:  # the models themselves, trained parameters only, beside the results
        stem = f"libero_{args.suite}_seed{args.seed}"
        sft_name = f"{stem}_sft{'_' + args.sft_variant if args.sft_variant else ''}.pt"
        sft_checkpoint = str(export_policy(sft_checkpoint, args.export_dir, sft_name))
        rl_name = f"{stem}_{args.method}{'_' + args.variant if args.variant else ''}.pt"
        rl_checkpoint = str(export_policy(rl_checkpoint, args.export_dir, rl_name,
                                          dtype=getattr(torch, args.rl_dtype)))
    row = {
        "suite": args.suite, "seed": args.seed, "method": args.method, "variant": args.variant, "split": args.split,
        "mode": args.mode,
        **dict(zip(("tasks", "init_states"), starts(sft_played))), "episodes": episodes,
        "sft": round(sft, 4), "rl": round(rl, 4), "env_steps": env_steps, "wall_minutes": minutes, "frames": seen,
        "commit": git_commit(), "sft_checkpoint": relative(sft_checkpoint), "rl_checkpoint": relative(rl_checkpoint),
        "outcomes": {"sft": outcomes(pathlib.Path(args.sft_eval)), "rl": outcomes(pathlib.Path(args.rl_eval))},
        **sampling(pathlib.Path(args.rl_eval)),
    }
    path = pathlib.Path(args.out)
    data = load(path)
    data["rows"] = [r for r in data["rows"] if key(r) != key(row)] + [row]
    data["rows"].sort(key=lambda r: tuple(str(part) for part in key(r)))
    write_results(path, data)
    return row


def table(data: dict) -> str:
    """One line per row: SFT -> RL success (95 % Wilson intervals) with the change in points (and the frames the
    policies saw, when the rows record them: LIBERO's)."""
    seen = any("frames" in r for r in data["rows"])
    lines = ["| suite | seed | method | split | mode | episodes | SFT | RL | change | McNemar p | env steps | minutes |" +
             (" frames |" if seen else ""),
             "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|" + ("---|" if seen else "")]
    for r in data["rows"]:
        method = f"{r['method']} {r['variant']}" if r.get("variant") else r["method"]
        p = mcnemar_p(r)
        lines.append(f"| {r['suite']} | {r['seed']} | {method} | {r['split']} | {r['mode']} | {r['episodes']} | "
                     f"{percent_interval(r['sft'], r['episodes'])} | {percent_interval(r['rl'], r['episodes'])} | "
                     f"{100 * (r['rl'] - r['sft']):+.1f} | {'-' if p is None else f'{p:.2g}'} | "
                     f"{r['env_steps']:,} | {r['wall_minutes']:.0f} |" + (f" {r.get('frames', '-')} |" if seen else ""))
    return "\n".join(lines) + "\n"


def replay(eval_dir: pathlib.Path, data: dict) -> dict:
    """The report in ``eval_dir`` (one model file, as ``trainers/eval.py`` played it) against the rows that name that
    file and played the same starts (tasks, init states, episode seeds where the row lists them) in the same mode, on
    the same frames (and, sampled, at the same token temperature; a Gaussian's std is the command's to match). Rows
    with equal outcomes for that model (one SFT report behind several methods' rows) make one comparison. SystemExit
    when no row matches, or when the file is no longer the one the report played."""
    report = json.loads((eval_dir / "eval.json").read_text())
    model = relative(ROOT / report["settings"]["checkpoint"])
    played_sha = (report.get("receipt", {}).get("checkpoint") or {}).get("sha256")
    if played_sha and played_sha != file_sha256(ROOT / model):
        raise SystemExit(f"{model} changed since {eval_dir} played it: evaluate the file as it is now")
    mode = "greedy" if report["settings"].get("deterministic", True) else "sampled"
    rate, played, episodes = read_eval(eval_dir)
    if not episodes:
        raise SystemExit(f"{eval_dir} played no episode")
    now, seen = outcomes(eval_dir), frames(eval_dir)
    tasks, init_states = starts(played)
    seeds = sorted(seed for _, _, seed in played)
    temperature = sampling(eval_dir).get("temperature")  # a token head's sampled rows: drawn at the same temperature
    matched = [(row, side) for row in data["rows"] for side in ("sft", "rl")
               if row.get(f"{side}_checkpoint") == model and row["mode"] == mode and "outcomes" in row
               and row.get("temperature") == temperature and row.get("frames", seen) == seen
               and (row["tasks"], row["init_states"], row["episodes"]) == (tasks, init_states, episodes)
               and sorted(row.get("eval_seeds", seeds)) == seeds]
    if not matched:
        raise SystemExit(f"no row names {model} on these {episodes} {mode} episodes (tasks {tasks}, init states "
                         f"{init_states[0]}-{init_states[-1]}, frames {seen}): replay a row's own command")
    dtypes = {str(v.dtype).removeprefix("torch.") for v in (load_checkpoint(ROOT / model).get("policy") or {}).values()
              if torch.is_tensor(v) and v.is_floating_point()}
    compared: dict[str, dict] = {}  # by the row's outcomes: rows sharing one report of this model compare once
    for row, side in matched:
        name = " ".join(str(row[k]) for k in KEY if row.get(k) not in ("", None)) + f" ({side})"
        then = row["outcomes"][side]
        if then in compared:
            compared[then]["row"] += f", {name}"
            continue
        compared[then] = {"row": name, "commit": row["commit"], "then": row[side],
                          "differ": sum(a != b for a, b in zip(then, now)), "p": mcnemar_outcomes_p(then, now)}
    return {"model": model, "split": matched[0][0]["split"], "mode": mode, "temperature": temperature,
            "episodes": episodes, "dtype": "/".join(sorted(dtypes)), "sha256": file_sha256(ROOT / model),
            "now": round(rate, 4), "commit": git_commit(),
            "rows": list(compared.values())}


def replays_table(data: dict) -> str:
    """One line per (recorded replay, row it was compared with): the success then and now, the changed episodes."""
    lines = ["| model | dtype | split | mode | rows (side) | measured | then | replayed | now | episodes changed | McNemar p |",
             "|---|---|---|---|---|---|---:|---|---:|---:|---:|"]
    for replayed in data.get("replays", []):
        for row in replayed["rows"]:
            lines.append(f"| {pathlib.Path(replayed['model']).name} | {replayed['dtype']} | {replayed['split']} | "
                         f"{replayed['mode']} | {row['row']} | {row['commit']} | "
                         f"{100 * row['then']:.1f} % | {replayed['commit']} | {100 * replayed['now']:.1f} % | "
                         f"{row['differ']} of {replayed['episodes']} | {row['p']:.2g} |")
    return "\n".join(lines) + "\n"


def percent_interval(rate: float, episodes: int) -> str:
    """``17.5 % [8.7, 32.0]``: the rate and its 95 % Wilson interval, in percent."""
    low, high = wilson_interval(round(rate * episodes), episodes)
    return f"{100 * rate:.1f} % [{100 * low:.1f}, {100 * high:.1f}]"


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    adding = sub.add_parser("add", help="add (or replace) a measured row")
    for flag in ("--suite", "--method", "--split", "--mode"):
        adding.add_argument(flag, required=True, choices={"--suite": ("object", "spatial"), "--method": ("grpo", "ppo", "rft", "residual"),
                                                          "--split": ("train", "heldout"),
                                                          "--mode": ("greedy", "sampled")}[flag])
    adding.add_argument("--seed", type=int, required=True, help="the training seed")
    adding.add_argument("--variant", default="", help="the RL config's version (e.g. v3): rows of several configs "
                                                      "for one (suite, seed, method) stand side by side")
    adding.add_argument("--sft-variant", default="", help="names the exported SFT model (e.g. 3demos: "
                                                          "libero_object_seed0_sft_3demos.pt), for SFTs of other demos")
    adding.add_argument("--sft-eval", required=True, help="trainers/eval.py report directory of the SFT checkpoint")
    adding.add_argument("--rl-eval", required=True, help="... of the RL checkpoint, on the same episodes")
    adding.add_argument("--sft-checkpoint", required=True)
    adding.add_argument("--rl-run", required=True, help="the RL run directory (checkpoints/ and tensorboard/, or an "
                                                         "RFT run's rft.json and round_R/)")
    adding.add_argument("--rl-checkpoint", help="default: the run's newest checkpoint")
    adding.add_argument("--export-dir", help="also save both models there, trained parameters only (for committing), "
                                             "and point the row at those copies, e.g. experiments/libero_miniature/models; a "
                                             "model already there (equal parameters) is not saved again")
    adding.add_argument("--rl-dtype", choices=("float32", "float16"), default="float32",
                        help="the exported RL model's parameters: float16 stores them at half the size (the token "
                             "campaigns' models, within the repository's size limit); the row was measured on the "
                             "run's float32 checkpoint")
    adding.add_argument("--out", default=str(RESULTS))
    showing = sub.add_parser("table", help="print the Markdown table")
    showing.add_argument("--out", default=str(RESULTS))
    rendering = sub.add_parser("readme", help="write the table into the study's README (--check: only compare)")
    rendering.add_argument("--out", default=str(RESULTS))
    rendering.add_argument("--readme", default=str(README))
    rendering.add_argument("--check", action="store_true")
    replaying = sub.add_parser("replay", help="a re-evaluation of a kept model against the rows that name it")
    replaying.add_argument("--eval", required=True, help="trainers/eval.py report directory of that model file")
    replaying.add_argument("--record", action="store_true", help="keep it in the JSON's replays (and the README)")
    replaying.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.command == "add":
        print(json.dumps(add(args)))
    elif args.command == "replay":
        data = load(pathlib.Path(args.out))
        replayed = replay(pathlib.Path(args.eval), data)
        print(replays_table({"replays": [replayed]}), end="")
        if args.record:  # one replay per model, split, mode and temperature: a newer one replaces it
            same = [replayed.get(k) for k in ("model", "split", "mode", "temperature")]
            data["replays"] = [r for r in data.get("replays", [])
                               if [r.get(k) for k in ("model", "split", "mode", "temperature")] != same]
            data["replays"].append(replayed)
            write_results(pathlib.Path(args.out), data)
    elif args.command == "readme":
        data = load(pathlib.Path(args.out))
        blocks = {"results": table(data)}
        if data.get("replays") or "<!-- replays:begin -->" in pathlib.Path(args.readme).read_text():
            blocks["replays"] = replays_table(data) if data.get("replays") else "No replay recorded yet.\n"
        stale = [name for name, text in blocks.items() if not render_block(args.readme, name, text, check=args.check)]
        if args.check and stale:
            raise SystemExit(f"{args.readme}'s {' and '.join(stale)} block differs from {args.out}: run "
                             f"{pathlib.Path(__file__).name} readme")
    else:
        print(table(load(pathlib.Path(args.out))), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
