"""The LIBERO SFT -> RL table, one (suite, seed) at a time, as a campaign that resumes wherever it stopped.

    python experiments/libero_miniature/campaign.py --suite object --seed 0 --method rft \
        --sft-checkpoint experiments/libero_miniature/models/libero_object_seed0_sft_3demos_fitted.pt  # adopt an SFT
    python experiments/libero_miniature/campaign.py --suite object --seed 1 --method rft --minutes 150  # 2.5 h cap
    python experiments/libero_miniature/campaign.py --suite object --seed 0 --method rft --status  # done, to do
    python experiments/libero_miniature/campaign.py --suite object --seed 1 --method residual  # on the same SFT
    python experiments/libero_miniature/campaign.py --suite spatial --seed 0 --method rft --cameras main wrist
    python experiments/libero_miniature/campaign.py --suite object --seed 0 --method grpo --head tokens  # action tokens
    python experiments/libero_miniature/campaign.py --suite object --seed 0 --method ppo --head tokens  # the comparison

The anchors' protocol in miniature (issue 28, experiments/libero_miniature/README.md), each step a product command:

1. **demos**: ``vla-gym demos`` of the scripted expert on init states 0-2 of every task (3 per task, DART noise
   0.1, main camera 128 px; ``--cameras main wrist`` adds the wrist camera to demos, SFT and RL, a campaign of its
   own in ``<suite>_s<seed>_wrist/`` whose models and rows are tagged ``wrist``), rebuilt when missing (they only
   feed step 2 and RFT's fits);
2. **sft**: ``trainers/sft.py`` on them for 2,400 steps (fitted: the control of the RFT runs), exported
   (trained parameters only) to ``experiments/libero_miniature/models/`` (``--export-dir``), where the rows point; or
   ``--sft-checkpoint`` adopts one (exported the same way: an equal model already there is reused, not copied).
   The campaign's ``sft.txt`` names that file: each model is stored once;
3. **rl**: ``--method grpo`` (the default): ``trainers/grpo.py`` with
   ``experiments/libero_miniature/configs/libero_object_miniature_grpo_v3.yaml`` from that SFT, groups drawn from init
   states 0-39 (``grpo.train_init_states=40``), until ``--rl-steps`` env steps (400,000: about 2 hours on 2 idle cores
   at 58 env steps/s); ``--method residual``: ``trainers/residual.py`` with
   ``examples/configs/libero_small_residual.yaml`` on the frozen SFT, episodes from the same starts, 100,000 env
   steps (48-80 min by host); ``--method rft``: ``trainers/rft.py`` from the SFT, ``--rft-rounds`` rounds (default
   1) of one sampled episode per training start (std 0.05) and a fit from scratch on the demos plus every success
   kept (4,800 steps), its round 0 the SFT's greedy report on the training starts (the same evaluation, read, not
   played again); ``--method ppo --head tokens``: ``trainers/ppo.py`` with
   ``configs/libero_object_miniature_ppo_tokens.yaml`` (a critic warmed up before the actor moves) from the token SFT,
   episodes from the same starts, token GRPO s3's 406,307 env steps (PPO counts decisions of 8 env steps). It comes
   before the evaluations because it is the long step: a session gives it its unbroken hours (one process, so its
   TensorBoard is also the memory curve of an hour of LIBERO RL, ``experiments/reliability_soaks/memory_run.py``),
   and evaluations resume episode by episode anyway. Once it has
   its steps, what only a resume needs is dropped (optimizers, critics, the replay);
4. **evaluations and rows**, one (split, mode) pair at a time: ``trainers/eval.py`` of the SFT model, then of the
   run's last checkpoint, on the training starts (init states 0-39 of every task, 400 episodes) or the held-out
   ones (40-49, 100 episodes), greedy or sampled (std 0.05 per step, GRPO's exploration noise); then that pair's
   row, ``experiments/libero_miniature/table.py add`` into ``experiments/libero_miniature/results.json`` (method
   ``grpo``, ``residual`` or ``rft``; variant ``protocol`` for GRPO and RFT), both models exported to
   ``experiments/libero_miniature/models/`` (git keeps the few the README names). Rows land one by one, training
   starts greedy first. The SFT's reports (``evals/sft_*``) serve every method; the RL model's are ``evals/rl_*``
   (GRPO), ``evals/residual_*`` or ``evals/rft_*``;
``--head tokens`` fits the small policy's action-token head instead of the Gaussian (``policy.kwargs.head=tokens``,
SFT by cross-entropy), runs GRPO with ``configs/libero_object_miniature_grpo_tokens.yaml`` (the anchors' settings),
samples RFT's episodes (later rounds at the temperature of the same width, ``trainers/rft.py --hold-entropy``) and
the ``sampled`` evaluations at temperature 1.6 and stores its SFT and RL models in half
precision (the SFT before anything plays it); a campaign of its own (``<suite>_s<seed>_tokens/``, variant
``protocol_tokens``), whose rows record ``head`` and ``temperature``.

5. **curve**: ``experiments/libero_miniature/figures.py --no-grids``: ``<method>_curve.png`` / ``.md`` in the
   campaign folder, the success of the RL run's rollouts per update (GRPO) or round (residual), or of each RFT
   round's model, with the greedy evaluations on the training starts as lines.

Everything a later step needs lives under ``runs/libero_rl_campaign/<suite>_s<seed>/`` (``--state``; git-ignored):
which SFT model (``sft.txt``), the evaluation reports (a stopped evaluation resumes from its ``partial/`` episodes),
the RL runs themselves (``grpo/``, ``residual/``, ``rft/``: the newest checkpoint, ``checkpoint.keep_last=1``, and
the TensorBoard), the demos and the SFT run (``--work``, the same folder by default). The same command goes on from
there, each step skipped when its output exists (a residual run stopped part-way resumes with its critics and
replay). What the study keeps in git is the rows (``results.json``) and the models the README names (``models/``).
``--minutes`` stops starting new steps after that long and gives the RL run the rest as ``time_limit_s`` (an RFT run
is not cut: its steps, each a product command, are skipped when done). ``--tasks``, ``--train-init-states``,
``--heldout-init-states``, ``--modes``, ``--sync``, ``--demos`` and the ``--sft-override`` / ``--rl-override`` /
``--eval-override`` lists shrink it for the short form (tests/test_libero_rl_campaign.py).
"""
from __future__ import annotations

import json
import pathlib
import shutil
import sys
import time

from vla_gym.runtime.cli_args import parse_ids, script_parser
from vla_gym.trainers.rft import run  # the same echoed step runner
from vla_gym.trainers.runtime.results import repo_relative

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STUDY = HERE.relative_to(ROOT)  # experiments/libero_miniature: the commands run from the repository root
ENV_IDS = {"object": "VLA/LiberoObject-v0", "spatial": "VLA/LiberoSpatial-v0"}
SFT_CONFIG = str(STUDY / "configs" / "libero_object_miniature_sft.yaml")
RL_CONFIGS = {"grpo": str(STUDY / "configs" / "libero_object_miniature_grpo_v3.yaml"),
              "residual": "examples/configs/libero_small_residual.yaml",  # the product's residual example
              "rft": SFT_CONFIG}  # RFT: each round's fit
TABLE = str(STUDY / "table.py")  # writes the rows (``add``) into RESULTS, its default
FIGURES = str(STUDY / "figures.py")
RESULTS = HERE / "results.json"
MODELS = HERE / "models"
#: env steps: 2-4 h of GRPO, 48-80 min of residual RL on 2 cores; PPO (the token comparison): token GRPO s3's
RL_STEPS = {"grpo": 400_000, "residual": 100_000, "ppo": 406_307}
#: the rows' variant (the residual rows of Object s0 came first; ``rft protocol`` beside the older RFT rows r200...)
VARIANTS = {"grpo": "protocol", "residual": "", "rft": "protocol", "ppo": "protocol"}
#: an RFT round's settings: one sampled episode per training start, the fit from scratch for 4,800 steps (twice the
#: SFT's 2,400: the demos plus a few hundred successes are several times the SFT's 29 episodes)
RFT_FLAGS = ["--samples-per-start", "1", "--std", "0.05"]
RFT_FIT = ["sft.epochs=100", "sft.max_steps=4800"]
METHOD_NAMES = {"grpo": "GRPO", "residual": "residual RL", "rft": "RFT", "ppo": "PPO"}  # in the curve's legend
MODES = {"greedy": [], "sampled": ["--stochastic", "--std", "0.05"]}
#: ``--head tokens``: the small policy's action-token head (256 bins per dimension, cross-entropy), its GRPO at the
#: anchors' settings, and sampled evaluations at the anchors' rollout temperature instead of a std
TOKENS_GRPO_CONFIG = str(STUDY / "configs" / "libero_object_miniature_grpo_tokens.yaml")
#: ``--method ppo`` (``--head tokens`` only): PPO with a warmed-up critic on the same tokens, the GRPO comparison
RL_CONFIGS["ppo"] = str(STUDY / "configs" / "libero_object_miniature_ppo_tokens.yaml")
CHUNK = 8  # env steps per decision of the study's ActionChunk: PPO counts decisions, the others env steps
TOKENS_SAMPLED = ["--stochastic", "--temperature", "1.6"]
#: an RFT round samples the tokens the same way, round 1 at 1.6 and each later round at the temperature that gives its
#: policy the SFT's width at 1.6 (a policy cloned from samples at 1.6 is flatter: Object s0's round 1 fit at 1.6 had
#: 3.01 nats per token against the SFT's 2.45, and its samples succeeded 15 % against 27 %)
TOKENS_RFT_FLAGS = ["--samples-per-start", "1", "--temperature", "1.6", "--hold-entropy"]


def copy_report(source: pathlib.Path, target: pathlib.Path) -> None:
    """``eval.json`` and ``eval.md`` of a finished trainers/eval.py report into ``target`` (the same evaluation)."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ("eval.json", "eval.md"):
        if (source / name).is_file():
            (target / name).write_bytes((source / name).read_bytes())


class Campaign:
    """Paths and commands of one (suite, seed) campaign (module docstring)."""

    def __init__(self, args):
        self.args = args
        #: the cameras besides the main one name a campaign of their own (``spatial_s0_wrist``): its SFT, RL and rows
        self.tag = "_".join([camera for camera in args.cameras if camera != "main"]
                            + (["tokens"] if args.head == "tokens" else []))
        folder = f"{args.suite}_s{args.seed}" + (f"_{self.tag}" if self.tag else "")
        self.state = pathlib.Path(args.state or ROOT / "runs/libero_rl_campaign" / folder).resolve()
        self.work = pathlib.Path(args.work).resolve() if args.work else self.state
        self.env_id = ENV_IDS[args.suite]
        self.deadline = time.monotonic() + 60 * args.minutes if args.minutes else None
        self.splits = {"train": args.train_init_states, "heldout": args.heldout_init_states}
        modes = {**MODES, "sampled": TOKENS_SAMPLED} if args.head == "tokens" else MODES
        self.modes = {mode: flags for mode, flags in modes.items() if mode in args.modes}  # greedy first

    # ---- where each step's output is
    @property
    def demos(self) -> pathlib.Path:
        return pathlib.Path(self.args.demos).resolve() if self.args.demos else self.work / "demos"

    @property
    def sft(self) -> pathlib.Path | None:
        """The campaign's SFT model, the file ``sft.txt`` names (relative to the repository); None before step 2."""
        pointer = self.state / "sft.txt"
        return ROOT / pointer.read_text().strip() if pointer.is_file() else None

    @property
    def model_dtype(self) -> str:
        """How the campaign stores its models: a token policy's in float16 (a committed SFT and RL pair then fits the
        repository's size limit), a Gaussian one's in float32. A token campaign's SFT is stored that way before
        anything plays it, so its evaluations, its RL run and its committed file are one model."""
        return "float16" if self.args.head == "tokens" else "float32"

    def keep_sft(self, checkpoint: str | pathlib.Path) -> None:
        """Export ``checkpoint`` beside the results (once: an equal model there is reused), in ``model_dtype``, and
        name it in ``sft.txt``. Another model already under the SFT's name (one that rows name, such as a float32
        file a float16 campaign would round) is not written over: SystemExit names the fix."""
        import torch

        from vla_gym.trainers.runtime.checkpoint import atomic_write_text, export_policy
        from vla_gym.trainers.runtime.results import repo_relative

        name = f"libero_{self.args.suite}_seed{self.args.seed}_sft_{self.sft_variant}.pt"
        try:
            model = export_policy(checkpoint, self.args.export_dir, name, dtype=getattr(torch, self.model_dtype),
                                  replace=False)
        except FileExistsError as exc:
            raise SystemExit(f"{exc} (a {self.model_dtype} campaign adopting {checkpoint})") from exc
        self.state.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.state / "sft.txt", f"{repo_relative(model)}\n")

    @property
    def method(self) -> str:
        return self.args.method

    @property
    def variant(self) -> str:
        """The rows' variant: the method's (``protocol`` for GRPO), then the extra cameras (``wrist``)."""
        return "_".join(part for part in (VARIANTS[self.method], self.tag) if part)

    @property
    def sft_variant(self) -> str:
        return "_".join(part for part in ("protocol", self.tag) if part)

    def camera_overrides(self, policy: bool) -> list[str]:
        """The env's cameras (and the SFT policy's, ``policy``) when the campaign uses more than the main one, and
        the SFT policy's head with ``--head tokens``."""
        overrides = ["policy.kwargs.head=tokens"] if policy and self.args.head == "tokens" else []
        if any(camera != "main" for camera in self.args.cameras):
            cameras = f"[{','.join(self.args.cameras)}]"
            overrides = [f"env.kwargs.cameras={cameras}", *([f"policy.kwargs.cameras={cameras}"] if policy else []),
                         *overrides]
        return overrides

    @property
    def rl_run(self) -> pathlib.Path:
        return self.state / self.method

    @property
    def rl_steps(self) -> int:
        return self.args.rl_steps or RL_STEPS[self.method]

    def eval_dir(self, who: str, split: str, mode: str) -> pathlib.Path:
        """``evals/<who>_<split>_<mode>``: ``who`` is ``sft``, ``rl`` (GRPO's, the first method) or ``residual``; both
        methods share the SFT's reports."""
        if who == "rl" and self.method != "grpo":
            who = self.method
        return self.state / "evals" / f"{who}_{split}_{mode}"

    def rl_checkpoint(self) -> pathlib.Path | None:
        """The RL run's newest model: its last checkpoint, or an RFT run's last finished round's fit."""
        if self.method == "rft":
            rounds = self.rft_rounds_done()
            return self.rl_run / f"round_{rounds}" / "sft" / "final.pt" if rounds else None
        checkpoints = sorted((self.rl_run / "checkpoints").glob("ckpt_*.pt"))
        return checkpoints[-1] if checkpoints else None

    def rl_steps_done(self) -> int:
        """Env steps the RL run has (a PPO run's decisions count ``CHUNK`` each, as table.py's budget does)."""
        checkpoint = self.rl_checkpoint()
        if checkpoint is None or self.method == "rft":
            return 0
        import torch

        counted = int(torch.load(checkpoint, map_location="cpu", weights_only=False)["counters"]["num_timesteps"])
        return counted * (CHUNK if self.method == "ppo" else 1)

    def rft_rounds_done(self) -> int:
        """Rounds of the RFT run fitted and evaluated (its ``rft.json`` rows after round 0)."""
        path = self.rl_run / "rft.json"
        rows = json.loads(path.read_text())["rows"] if path.is_file() else []
        return max((int(r["round"]) for r in rows), default=0)

    def rl_done(self) -> bool:
        if self.method == "rft":
            return self.rft_rounds_done() >= self.args.rft_rounds
        return self.rl_steps_done() >= self.rl_steps

    def rl_progress(self) -> str:
        if self.method == "rft":
            return f"rft ({self.rft_rounds_done()} of {self.args.rft_rounds} rounds)"
        return f"{self.method} ({self.rl_steps_done():,} of {self.rl_steps:,} env steps)"

    def minutes_left(self) -> float | None:
        return None if self.deadline is None else (self.deadline - time.monotonic()) / 60

    def out_of_time(self) -> bool:
        left = self.minutes_left()
        return left is not None and left <= 0

    # ---- the steps
    def make_demos(self) -> None:
        run([sys.executable, "-m", "vla_gym.cli", "demos", self.env_id, "--init-states", self.args.demo_init_states,
             "--noise", "0.1", "--cameras", *self.args.cameras, "--image-size", "128", "--workers", "2",
             *self.task_flags(), "--out", str(self.demos)])

    def fit_sft(self) -> None:
        if not (self.demos / "meta").is_dir():
            self.make_demos()
        run([sys.executable, "trainers/sft.py", "--config", SFT_CONFIG, f"env.id={self.env_id}",
             f"run_dir={self.work}", "name=sft", f"sft.dataset={self.demos}", f"seed={self.args.seed}",
             "sft.epochs=100", "sft.max_steps=2400", *self.camera_overrides(policy=True), *self.args.sft_override])
        self.keep_sft(self.work / "sft" / "final.pt")

    def evaluated(self, who: str, split: str, mode: str, checkpoint: pathlib.Path | None) -> bool:
        """Whether that report is finished and of ``checkpoint`` (a longer RL run has a newer one)."""
        report = self.eval_dir(who, split, mode) / "eval.json"
        if checkpoint is None or not report.is_file():
            return False
        played = pathlib.Path(json.loads(report.read_text())["settings"]["checkpoint"])  # relative: the repository's
        return (ROOT / played).resolve() == checkpoint.resolve()

    def evaluate_pairs(self) -> None:
        """SFT then RL for each (split, mode), and that row as soon as both reports are in: rows land one by one."""
        checkpoints = {"sft": self.sft, "rl": self.rl_checkpoint()}
        for split, init_states in self.splits.items():
            for mode, flags in self.modes.items():
                played = False
                for who, checkpoint in checkpoints.items():
                    if who == "rl" and (split, mode) == ("train", "greedy"):
                        self.adopt_round_report()
                    if self.evaluated(who, split, mode, checkpoint):
                        continue
                    if self.out_of_time():
                        return
                    played = True
                    run([sys.executable, "trainers/eval.py", "--checkpoint", repo_relative(checkpoint), "--init-states",
                         init_states, *self.task_flags(), *flags, "--num-envs", str(self.args.num_envs),
                         "--video-episodes", "0", "--seed", "0", "--out", str(self.eval_dir(who, split, mode)),
                         f"env.vectorization={'sync' if self.args.sync else 'async'}", *self.args.eval_override])
                if played or not self.has_row(split, mode):  # a row keeps the commit that measured it
                    self.add_row(split, mode)

    def train_rl(self) -> None:
        """GRPO from the SFT model, or residual RL on it (frozen), until ``rl_steps`` env steps, or RFT's rounds
        from it (:meth:`train_rft`); resumes its run."""
        if self.method == "rft":
            return self.train_rft()
        starts = self.args.train_rl_init_states
        if self.method == "grpo":
            method = [f"grpo.init_checkpoint={self.sft}", f"grpo.train_init_states={starts}"]
        elif self.method == "ppo":  # its episodes start from the training starts alone
            method = [f"ppo.init_checkpoint={self.sft}", f"env.kwargs.init_states=0-{starts - 1}"]
        else:
            method = [f"policy.kwargs.base_checkpoint={repo_relative(self.sft)}", f"residual.train_init_states={starts}"]
        config = TOKENS_GRPO_CONFIG if self.method == "grpo" and self.args.head == "tokens" else RL_CONFIGS[self.method]
        counted = -(-self.rl_steps // CHUNK) if self.method == "ppo" else self.rl_steps  # PPO: decisions
        command = [sys.executable, f"trainers/{self.method}.py", "--config", config,
                   f"env.id={self.env_id}", f"run_dir={self.state}", f"name={self.method}", f"seed={self.args.seed}",
                   *method, f"total_timesteps={counted}", "checkpoint.keep_last=1",
                   *self.camera_overrides(policy=self.method != "residual"), *self.args.rl_override]
        left = self.minutes_left()
        if left is not None:
            command.append(f"time_limit_s={int(60 * left)}")
        run(command)

    def adopt_round_report(self) -> None:
        """An RFT run's last round ends with the greedy evaluation of its model on the training starts, the same
        command as the campaign's (``--init-states`` of the training split, ``--seed 0``, no videos): that report is
        the RL model's train/greedy report (copied, naming the same checkpoint), not played a second time."""
        checkpoint = self.rl_checkpoint()
        if self.method != "rft" or checkpoint is None or not self.rft_reports_are_the_campaigns():
            return
        source = checkpoint.parent.parent / "eval"
        if (source / "eval.json").is_file() and not self.evaluated("rl", "train", "greedy", checkpoint):
            copy_report(source, self.eval_dir("rl", "train", "greedy"))

    def rft_reports_are_the_campaigns(self) -> bool:
        """Whether an RFT round's greedy evaluation is the campaign's of the training split: the same starts
        (init states 0..N-1 of the RL run), played with the checkpoint's env (no ``--eval-override``)."""
        rl_starts = list(range(self.args.train_rl_init_states))
        return parse_ids(self.args.train_init_states) == rl_starts and not self.args.eval_override

    def train_rft(self) -> None:
        """RFT rounds from the SFT model on init states 0..N-1 of every task (``trainers/rft.py`` resumes its steps).
        Its round 0, the SFT's greedy evaluation on those starts, is the SFT's report of the training split when
        the two are the same episodes (the same command: read, not played again)."""
        if not (self.demos / "meta").is_dir():
            self.make_demos()
        starts = f"0-{self.args.train_rl_init_states - 1}"
        round_0 = self.rl_run / "round_0" / "eval"
        if self.rft_reports_are_the_campaigns() and not (round_0 / "eval.json").is_file() and self.evaluated(
                "sft", "train", "greedy", self.sft):
            copy_report(self.eval_dir("sft", "train", "greedy"), round_0)
        run([sys.executable, "trainers/rft.py", "--sft-config", SFT_CONFIG, "--demos", str(self.demos),
             "--init-checkpoint", str(self.sft), "--init-states", starts, *self.task_flags(),
             *(TOKENS_RFT_FLAGS if self.args.head == "tokens" else RFT_FLAGS),
             "--rounds", str(self.args.rft_rounds), "--seed", str(self.args.seed), "--num-envs", str(self.args.num_envs),
             *(["--sync"] if self.args.sync else []), "--out", str(self.rl_run), f"env.id={self.env_id}", *RFT_FIT,
             *self.camera_overrides(policy=True), *self.args.rl_override])

    def has_row(self, split: str, mode: str) -> bool:
        results = pathlib.Path(self.args.results)
        rows = json.loads(results.read_text())["rows"] if results.is_file() else []
        return any((r["suite"], r["seed"], r["method"], r.get("variant"), r["split"], r["mode"]) ==
                   (self.args.suite, self.args.seed, self.method, self.variant, split, mode) for r in rows)

    def add_row(self, split: str, mode: str) -> None:
        """The (split, mode) row of ``--results`` (replacing an older one with the same key), the models exported."""
        run([sys.executable, TABLE, "add", "--suite", self.args.suite,
             "--seed", str(self.args.seed), "--method", self.method, "--variant", self.variant, "--split", split,
             "--mode", mode, "--sft-eval", str(self.eval_dir("sft", split, mode)),
             "--rl-eval", str(self.eval_dir("rl", split, mode)), "--sft-checkpoint", str(self.sft),
             "--sft-variant", self.sft_variant, "--rl-run", str(self.rl_run),
             "--export-dir", self.args.export_dir, "--out", self.args.results,
             "--rl-dtype", self.model_dtype])

    @property
    def curve(self) -> pathlib.Path:
        return self.state / f"{self.method}_curve.png"

    def draw_curve(self) -> None:
        run([sys.executable, FIGURES, "--grpo", str(self.rl_run),
             "--before", str(self.eval_dir("sft", "train", "greedy")), "--after", str(self.eval_dir("rl", "train", "greedy")),
             "--out", str(self.rl_run), "--no-grids", "--method", METHOD_NAMES[self.method]])

    def task_flags(self) -> list[str]:
        return ["--tasks", self.args.tasks] if self.args.tasks else []

    # ---- the plan
    def status(self) -> list[tuple[str, bool]]:
        checkpoints = {"sft": self.sft, "rl": self.rl_checkpoint()}
        evals = []
        for split in self.splits:
            for mode in self.modes:
                for who in ("sft", "rl"):
                    folder, done = self.eval_dir(who, split, mode), self.evaluated(who, split, mode, checkpoints[who])
                    played = 0 if done else sum(len(log.read_text().splitlines())
                                                for log in (folder / "partial").glob("rank*.jsonl"))
                    evals.append((folder.name.replace("_", " ") + (f" ({played} episodes played)" if played else ""),
                                  done))
        steps = [("sft", self.sft is not None and self.sft.is_file()),
                 (self.rl_progress(), self.rl_done()), *evals, ("curve", self.curve.is_file())]
        return steps

    def run_all(self) -> None:
        if self.sft is None:
            if self.args.sft_checkpoint:
                self.keep_sft(self.args.sft_checkpoint)
            else:
                self.fit_sft()
        if self.out_of_time():
            return
        if not self.rl_done():
            self.train_rl()
        if not self.rl_done():
            return
        self.slim_finished_rl()
        self.evaluate_pairs()  # returns early only when out of time
        if not self.out_of_time() and not self.curve.is_file():
            self.draw_curve()

    def slim_finished_rl(self) -> None:
        """The RL run has its env steps: what only a resume needs goes (the campaign folder keeps one model). GRPO's
        checkpoint drops its optimizer state (two thirds of its size); a residual run's its critics and their
        optimizers (``td3``, 90 %), its ``replay.pt`` and ``final.pt`` (a copy). The policy, counters and RNG states
        stay, so the evaluations and rows are unchanged; a larger ``--rl-steps`` resumes from it with a fresh Adam
        (GRPO) or fresh critics and an empty replay (residual)."""
        from vla_gym.trainers.runtime.checkpoint import atomic_save, load_checkpoint

        if self.method == "rft":  # each fit's periodic checkpoints: final.pt, which the reports name, stays
            for spare in self.rl_run.glob("round_*/sft/checkpoints"):
                shutil.rmtree(spare)
            return
        checkpoint = self.rl_checkpoint()
        state = load_checkpoint(checkpoint)
        extra = state.get("extra") or {}
        if state.get("optimizer") is not None or extra.get("td3") is not None:  # what only a resume needs
            atomic_save({**state, "optimizer": None, "extra": {**extra, "td3": None}}, checkpoint)
        for spare in ("replay.pt", "final.pt"):
            (self.rl_run / spare).unlink(missing_ok=True)


def parse_args(argv: list[str] | None = None):
    parser = script_parser(__doc__)
    parser.add_argument("--suite", required=True, choices=sorted(ENV_IDS))
    parser.add_argument("--seed", type=int, required=True, help="the training seed of SFT and RL")
    parser.add_argument("--method", default="grpo", choices=sorted(RL_CONFIGS),
                        help="grpo: GRPO from the SFT; residual: residual RL on the frozen SFT; rft: rounds of "
                             "rejection-sampling fine-tuning from it; ppo (--head tokens): PPO with a warmed-up "
                             "critic on its tokens (same SFT and its reports)")
    parser.add_argument("--rft-rounds", type=int, default=1, help="--method rft: rounds of sampling and fitting")
    parser.add_argument("--sft-checkpoint", help="adopt this SFT checkpoint instead of fitting one")
    parser.add_argument("--rl-steps", type=int, default=None,
                        help=f"the RL run's env-step budget (default {RL_STEPS})")
    parser.add_argument("--minutes", type=float, default=None, help="start no step after this many minutes")
    parser.add_argument("--status", action="store_true", help="print the steps done and to do, run nothing")
    parser.add_argument("--tasks", default=None, help="only these task ids (default: every task)")
    parser.add_argument("--train-init-states", default="0-39", help="the training starts evaluated")
    parser.add_argument("--train-rl-init-states", type=int, default=40,
                        help="the RL run's starts: init states 0..N-1 of every task")
    parser.add_argument("--heldout-init-states", default="40-49")
    parser.add_argument("--demo-init-states", default="0-2")
    parser.add_argument("--head", choices=("gaussian", "tokens"), default="gaussian",
                        help="the small policy's action head: gaussian (MSE, sampled with a std) or tokens (256 bins "
                             "per dimension, cross-entropy, GRPO at the anchors' settings, sampled at temperature 1.6); "
                             "tokens is a campaign of its own (<suite>_s<seed>_tokens/, variant ..._tokens)")
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), default=list(MODES),
                        help="the evaluation modes, each a row per split (default: greedy and sampled)")
    parser.add_argument("--cameras", nargs="+", default=["main"],
                        help="the demos', SFT's and RL's cameras; more than main makes a campaign of its own "
                             "(folder, model names and rows tagged with the others: main wrist -> _wrist)")
    parser.add_argument("--demos", default=None, help="use these demos (a LeRobot dataset) instead of recording them")
    parser.add_argument("--num-envs", type=int, default=2, help="trainers/eval.py --num-envs")
    parser.add_argument("--sync", action="store_true",
                        help="evaluate with the envs in the evaluating process (env.vectorization=sync, "
                             "trainers/rft.py --sync) instead of one process each: a short form")
    parser.add_argument("--sft-override", nargs="*", default=[], metavar="key=value")
    parser.add_argument("--rl-override", "--grpo-override", dest="rl_override", nargs="*", default=[], metavar="key=value")
    parser.add_argument("--eval-override", nargs="*", default=[], metavar="key=value")
    parser.add_argument("--state", default=None,
                        help="where the campaign is kept (default runs/libero_rl_campaign/<suite>_s<seed>[_<cameras>])")
    parser.add_argument("--work", default=None, help="scratch for demos and the SFT run (default: the --state folder)")
    parser.add_argument("--export-dir", default=str(MODELS), help="where the rows' models are exported")
    parser.add_argument("--results", default=str(RESULTS), help="the rows (table.py's results.json)")
    args = parser.parse_args(argv)
    if args.method == "ppo" and args.head != "tokens":
        parser.error("--method ppo is the token GRPO comparison (configs/libero_object_miniature_ppo_tokens.yaml): "
                     "add --head tokens")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    campaign = Campaign(args)
    if not args.status:
        campaign.run_all()
    steps = campaign.status()
    for name, done in steps:
        print(f"  [{'x' if done else ' '}] {name}")
    print(f"{args.suite} seed {args.seed}: {'complete' if all(d for _, d in steps) else 'in progress'} "
          f"({campaign.state})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
