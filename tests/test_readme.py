"""Every command and code block in README.md runs, in a short form.

Commands: every line of a ```bash block that starts with ``torchrun``, ``python``, ``python3`` or ``vla-gym``
(``a && b`` counts as two lines, ``\\``-continued lines as one) must be a key of ``SHORT_FORMS`` (or of
``NOT_RUN``, with the reason); a new README command fails ``test_every_readme_command_has_a_short_form`` with
"add a short form for: <cmd>". A short form is the README command with tokens replaced and arguments appended;
a ``--config`` command also gets its config's short form (tests/short_runs.py: one update, one env per
process, tiny models). They run in one working directory that mirrors the checkout, so the README's relative
paths (``runs/...``) work, and a command may need another to run first (the checkpoint the GRPO command starts
from comes from the main job). ``torchrun`` on one node gets ``--standalone`` (a free port).

Where the command is several processes (the main job's two torchrun ranks, the two nodes of the multi-node
command) it runs as such, a real ``torchrun``. Every other command runs in one driver process, one after another
(tests/config_driver.py: its script executed as ``__main__`` with its argv, its output and exit code captured as a
subprocess's; a one-process ``torchrun`` with the rank variables torchrun sets).

Python blocks: each runs as ``python -c`` (after ``PRELUDE``, so a block may use the names the blocks above it
imported; in a namespace of its own, in the same driver process as the commands) with the replacements of
``PYTHON_BLOCKS``, keyed by the block's first line that is not an import (see ``block_id``). A block that
makes a BEHAVIOR env must fail with the clear "needs Isaac Sim" error (no machine here can run it).
"""
from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess

import pytest
import yaml
from config_driver import Job, run_jobs
from short_runs import (
    ROOT,
    TINY_VLM,
    assert_ok,
    config_short_form,
    executable,
    free_port,
    run_command,
    start_command,
    tiny_vlms,
    trainer_script,
)

README = ROOT / "README.md"
RUN_PROGRAMS = ("torchrun", "python", "python3", "vla-gym")
#: first words of README lines that are not run (installation, viewers)
IGNORED_PROGRAMS = ("bash", "pip", "tensorboard", "apt", "apt-get", "sudo", "git", "cd", "export", "conda")
MAIN_JOB = "torchrun --nproc_per_node=2 trainers/ppo.py --config examples/configs/maniskill_pushcube_ppo.yaml"
LIBERO_DEMOS = ("vla-gym demos VLA/LiberoSpatial-v0 --episodes-per-task 20 --image-size 224 --out data/libero_spatial "
                "--workers 2")
LIBERO_SFT = "torchrun --nproc_per_node=2 trainers/sft.py --config examples/configs/libero_small_sft.yaml"


@dataclasses.dataclass(frozen=True)
class Short:
    """How to shorten one README command."""
    extra: tuple[str, ...] = ()              # appended (after the config's short form, so they win)
    replace: tuple[tuple[str, str], ...] = ()  # (old, new) substrings of the command; {port}: a free port
    needs: str | None = None                 # a README command that must have run first (same working dir)
    copies: int = 1                          # start this many at once (the nodes of a multi-node command)
    expect_files: tuple[str, ...] = ()       # globs (relative to the working dir) that must match afterwards
    #: tests/test_examples.py::test_config_runs_one_update runs this very command's short form for every config, so
    #: it is checked to be that command and not run twice: ``python trainers/<algo>.py --config <config>``, or the
    #: same on one torchrun process (after ``replace``) with overrides that the config's short form sets again
    same_as_config_test: bool = False


# README command (as written, comments dropped, whitespace collapsed) -> its short form
SHORT_FORMS = {
    MAIN_JOB: Short(
        extra=("eval.episodes=2", "eval.video=true", "eval.video_episodes=1", "eval.num_envs=1"),
        expect_files=("runs/maniskill_pushcube_ppo/checkpoints/ckpt_*.pt", "runs/maniskill_pushcube_ppo/config.yaml",
                      "runs/maniskill_pushcube_ppo/eval/eval.md", "runs/maniskill_pushcube_ppo/eval/videos/*.mp4")),
    # one process: GRPO's two ranks are tests/test_torchrun.py's (identical parameters, groups split over the ranks)
    "torchrun --nproc_per_node=2 trainers/grpo.py --config examples/configs/maniskill_pushcube_grpo.yaml "
    "grpo.init_checkpoint=runs/maniskill_pushcube_ppo/checkpoints/ckpt_00000264.pt": Short(
        replace=(("ckpt_00000264.pt", "ckpt_00000001.pt"), ("--nproc_per_node=2", "--nproc_per_node=1")),
        needs=MAIN_JOB, expect_files=("runs/maniskill_pushcube_grpo/checkpoints/ckpt_*.pt",)),
    "python trainers/eval.py --checkpoint runs/maniskill_pushcube_ppo/checkpoints/ckpt_00000264.pt --num-envs 4": Short(
        replace=(("ckpt_00000264.pt", "ckpt_00000001.pt"), ("--num-envs 4", "--num-envs 1")),
        extra=("--episodes-per-task", "2"),
        needs=MAIN_JOB, expect_files=("runs/maniskill_pushcube_ppo/eval-ckpt_00000001/eval.md",)),
    # two nodes on this machine: two launchers meet at one c10d endpoint, one process each
    "torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=HOST:29500 trainers/grpo.py "
    "--config examples/configs/libero_10_grpo.yaml": Short(
        replace=(("--nproc_per_node=8", "--nproc_per_node=1"), ("HOST:29500", "127.0.0.1:{port}")), copies=2,
        expect_files=("runs/libero_10_grpo/checkpoints/ckpt_*.pt",)),
    # on one process, with the model the config's short form names (a tiny PaliGemma): the config test's command
    "torchrun --nproc_per_node=8 trainers/grpo.py --config examples/configs/libero_vla_tokens_grpo.yaml "
    "policy.kwargs.model=/checkpoints/my-paligemma-sft": Short(
        replace=(("--nproc_per_node=8", "--nproc_per_node=1"),), same_as_config_test=True),
    "python trainers/ppo.py --config examples/configs/maniskill_small_ppo.yaml": Short(same_as_config_test=True),
    # LIBERO demos -> SFT -> GRPO -> eval, chained: one short episode of one task, two SFT steps, one GRPO update
    LIBERO_DEMOS: Short(
        replace=(("--episodes-per-task 20", "--episodes-per-task 1"), ("--image-size 224", "--image-size 64"),
                 ("--workers 2", "--workers 1")),
        extra=("--tasks", "0", "--keep-failures", "--env-kwarg", "max_episode_steps=8"),
        expect_files=("data/libero_spatial/meta/info.json",)),
    # one process: SFT's two ranks are tests/test_sft.py::test_sft_under_torchrun_two_processes's
    LIBERO_SFT: Short(replace=(("--nproc_per_node=2", "--nproc_per_node=1"),), needs=LIBERO_DEMOS,
                      expect_files=("runs/libero_small_sft/final.pt",)),
    "python trainers/grpo.py --config examples/configs/libero_small_grpo.yaml "
    "grpo.init_checkpoint=runs/libero_small_sft/final.pt": Short(
        needs=LIBERO_SFT, expect_files=("runs/libero_small_grpo/checkpoints/ckpt_*.pt",)),
    "python trainers/ppo.py --config examples/configs/cartpole_ppo.yaml env.vectorization=async "
    "rollout.pipeline_stages=2": Short(extra=("env.num_envs=2", "env.vectorization=async"), expect_files=("runs/cartpole_ppo/checkpoints/ckpt_*.pt",)),
    "python trainers/eval.py --checkpoint runs/maniskill_pushcube_ppo/checkpoints/ckpt_00000264.pt --ood": Short(
        replace=(("ckpt_00000264.pt", "ckpt_00000001.pt"), ("--ood", "--ood paraphrase,action_noise")),
        extra=("--episodes-per-task", "1"), needs=MAIN_JOB,
        expect_files=("runs/maniskill_pushcube_ppo/eval-ckpt_00000001/ood.md",)),  # reads the LIBERO-PRO catalog, builds no scene
    # a committed model: one held-out start of one task, 8 steps (the row's numbers: tests/test_eval_resume.py plays
    # the committed SFT model; re-evaluating the whole row takes about 10 minutes)
    "python trainers/eval.py --checkpoint experiments/libero_miniature/models/libero_spatial_seed0_grpo_protocol_wrist_tokens.pt "
    "--init-states 40-49 --seed 0 --num-envs 2 --out runs/eval_spatial_seed0_grpo env.vectorization=async": Short(
        replace=(("--init-states 40-49", "--init-states 40"), ("--num-envs 2", "--num-envs 1")),
        extra=("env.kwargs.max_episode_steps=8", "--tasks", "0", "--video-episodes", "0"),  # the override beside its kin
        expect_files=("runs/eval_spatial_seed0_grpo/eval.json",)),
    "python trainers/eval.py --checkpoint runs/libero_small_sft/final.pt --episodes-per-task 10": Short(
        replace=(("--episodes-per-task 10", "--episodes-per-task 1"),), extra=("--tasks", "0"),
        needs=LIBERO_SFT, expect_files=("runs/libero_small_sft/eval-final/eval.md",)),
}
# README commands that are not run here, with the reason (a test file named in the reason must run the command)
NOT_RUN = {
    "python3 -m pytest": "the test suite itself",
    "python3 -m pytest -m slow": "the test suite itself (its slow part)",
    "python3 -m pytest -m quick": "the test suite itself (its quick tier)",
    "python examples/sft_then_rl.py --out runs/sft_then_rl":
        "its short form is run by the script's own test, tests/test_vla_demos.py",
}

# python blocks: first line -> (replacements, prelude lines, expectation: "ok", "isaac" or "error:<words>")
PRELUDE = "import gymnasium as gym\nimport vla_gym\nfrom vla_gym.wrappers import *  # noqa: F403\n"
PYTHON_BLOCKS = {
    'envs = vla_gym.make_vec("VLA/ManiSkill-PickCube-v0", 8, vectorization="async",': {
        "replace": (('"VLA/ManiSkill-PickCube-v0", 8,', '"VLA/ManiSkill-PickCube-v0", 2,'),),
    },
    'model = PPO("mlp", "CartPole-v1", num_envs=8, n_steps=32, batch_size=256, n_epochs=20, learning_rate=1e-3)': {
        "replace": (("model.learn(100_000)", "model.learn(512)"),),
    },
}


# ------------------------------------------------------------------------------------------------ parsing
def fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}[ \t]*\n(.*?)^```", text, flags=re.S | re.M)


def readme_commands(text: str) -> list[str]:
    """The bash lines of README.md, continuation lines joined, comments dropped, ``&&`` split, in order."""
    commands = []
    for block in fenced_blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            try:
                tokens = shlex.split(line, comments=True)
            except ValueError:  # unbalanced quotes: take the words as they are
                tokens = line.split("#")[0].split()
            part = []
            for token in [*tokens, "&&"]:
                if token != "&&":
                    part.append(token)
                elif part:
                    commands.append(" ".join(part))
                    part = []
    return list(dict.fromkeys(commands))  # once each, first occurrence first


def runnable_commands() -> list[str]:
    return [c for c in readme_commands(README.read_text()) if c.split()[0] in RUN_PROGRAMS]


def python_blocks() -> list[str]:
    return fenced_blocks(README.read_text(), "python")


def block_id(block: str) -> str:
    """A block's name: its first line that is not an import, without its comment."""
    lines = [line.split("  #")[0].strip() for line in block.strip().splitlines()]
    return next((line for line in lines if line and not line.startswith(("import ", "from "))), lines[0])


# ------------------------------------------------------------------------------------------------ running
@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A directory that mirrors the checkout (symlinks), so README paths work and runs/ lands in a tmp dir."""
    work = tmp_path_factory.mktemp("readme")
    for entry in ROOT.iterdir():
        if entry.name not in ("runs", "videos", ".git") and not entry.name.startswith(".pytest"):
            (work / entry.name).symlink_to(entry)
    return work


def replaced(command: str, short: Short, strict: bool = True) -> str:
    """The README command with the short form's replacements ({port}: a free port); ``strict``: each must apply."""
    port = str(free_port())
    for old, new in short.replace:
        assert old in command or not strict, f"README command changed: {old!r} not in {command!r}; update SHORT_FORMS"
        command = command.replace(old, new.replace("{port}", port))
    return command


def process_count(argv: list[str]) -> int:
    """How many processes a (torchrun) command line starts."""
    if argv[0] != "torchrun":
        return 1
    flags = dict(arg.lstrip("-").split("=", 1) for arg in argv[1:] if arg.startswith("--") and "=" in arg)
    return int(flags.get("nnodes", 1)) * int(flags.get("nproc_per_node", 1))


def runs_in_process(command: str) -> bool:
    """One process on one node: run by the driver (several: a real torchrun, or several launchers)."""
    short = SHORT_FORMS[command]
    return short.copies == 1 and process_count(shlex.split(replaced(command, short, strict=False))) == 1


def short_argv(command: str, short: Short, models_base) -> list[str]:
    """The short form as typed (``torchrun``, ``python``, ``vla-gym`` first)."""
    program, *args = shlex.split(replaced(command, short))
    if program == "torchrun" and not any(arg.startswith("--nnodes") for arg in args):
        args = ["--standalone", *args]
    if "--config" in args:
        config = ROOT / args[args.index("--config") + 1]
        policy = (yaml.safe_load(config.read_text()).get("policy") or {}).get("name", "")
        models = tiny_vlms(models_base) if policy in TINY_VLM else {}
        args += config_short_form(config, "runs", models, process_count([program, *args]))
    return [program, *args, *short.extra]


def run_processes(command: str, short: Short, workdir, models_base):
    """A command of several processes, for real (``short.copies`` launchers at once)."""
    argv = short_argv(command, short, models_base)
    argv = [*executable(argv[0]), *argv[1:]]
    if short.copies == 1:
        return run_command(argv, cwd=workdir, timeout=480)
    processes = [start_command(argv, cwd=workdir) for _ in range(short.copies)]
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=480)
        results.append(subprocess.CompletedProcess(argv, process.returncode, stdout, stderr))
    failed = [r for r in results if r.returncode != 0]
    return failed[0] if failed else results[0]


def block_code(block: str) -> str:
    """``PRELUDE`` and the block with its replacements (the test checks that each still applies)."""
    rules = PYTHON_BLOCKS.get(block_id(block), {})
    code = block
    for old, new in rules.get("replace", ()):
        code = code.replace(old, new)
    return PRELUDE + rules.get("prelude", "") + code


def in_process_commands() -> list[str]:
    """The README commands the driver runs, in README order with each one's needs before it."""
    ordered: list[str] = []

    def add(command: str) -> None:
        short = SHORT_FORMS[command]
        if command in ordered or short.same_as_config_test or not runs_in_process(command):
            return
        if short.needs:
            add(short.needs)
        ordered.append(command)

    for command in runnable_commands():
        if command in SHORT_FORMS:
            add(command)
    return ordered


@pytest.fixture(scope="module")
def runner(workdir, tmp_path_factory):
    """``run(command)`` -> its short form's CompletedProcess (``run("block:<block id>")``: a python block's). The
    first command or block of the driver's runs them all; a command of several processes runs on its own."""
    done: dict[str, subprocess.CompletedProcess] = {}
    models_base = tmp_path_factory.getbasetemp()

    def run(key: str):
        if key not in done:
            if key.startswith("block:") or runs_in_process(key):
                run_driver()
            else:
                short = SHORT_FORMS[key]
                if short.needs:
                    run(short.needs)  # the test checks its result
                done[key] = run_processes(key, short, workdir, models_base)
        return done[key]

    def run_driver():
        jobs = []
        for command in in_process_commands():
            needs = SHORT_FORMS[command].needs
            if needs and not runs_in_process(needs):
                run(needs)
            try:
                jobs.append(Job(command, short_argv(command, SHORT_FORMS[command], models_base), cwd=str(workdir)))
            except AssertionError as exc:  # "README command changed": that command's test says so
                done[command] = subprocess.CompletedProcess(command, 1, "", str(exc))
        jobs += [Job(f"block:{block_id(block)}", ["python", "-c", block_code(block)], cwd=str(workdir))
                 for block in python_blocks()]
        done.update(run_jobs(jobs, tmp_path_factory.mktemp("readme_driver"), cwd=workdir))

    return run


# ------------------------------------------------------------------------------------------------ tests
def test_the_parser_reads_the_readme():
    commands = readme_commands(README.read_text())
    assert MAIN_JOB in commands, "the README's main job (torchrun, 2 processes) is not found by the parser"
    assert not any(c.startswith("#") or "\\" in c for c in commands)
    assert python_blocks(), "no ```python blocks found"


def test_the_readme_names_the_main_jobs_last_checkpoint():
    """The commands that start from the main job's checkpoint name the one a full run leaves (its last update)."""
    import math

    config = yaml.safe_load((ROOT / "examples/configs/maniskill_pushcube_ppo.yaml").read_text())
    per_update = config["ppo"]["n_steps"] * config["env"]["num_envs"]
    last = f"ckpt_{math.ceil(config['total_timesteps'] / per_update):08d}.pt"
    named = set(re.findall(r"maniskill_pushcube_ppo/checkpoints/(ckpt_\d+\.pt)", README.read_text()))
    assert named == {last}, f"the README names {sorted(named)}; a full main job ends with {last}"


def test_every_readme_command_has_a_short_form():
    missing = [c for c in readme_commands(README.read_text())
               if c.split()[0] in RUN_PROGRAMS and c not in SHORT_FORMS and c not in NOT_RUN]
    assert not missing, "\n".join(f"add a short form for: {c}" for c in missing)
    unknown = [c for c in readme_commands(README.read_text()) if c.split()[0] not in RUN_PROGRAMS + IGNORED_PROGRAMS]
    assert not unknown, f"README lines of no known kind (run them or add them to IGNORED_PROGRAMS): {unknown}"


def test_commands_not_run_here_are_run_elsewhere():
    for command, reason in NOT_RUN.items():
        for test_file in re.findall(r"tests/\w+\.py", reason):
            script = shlex.split(command)[1]
            assert script in (ROOT / test_file).read_text(), f"{test_file} does not run {script} ({command})"


@pytest.mark.parametrize("command", [c for c in runnable_commands() if c in SHORT_FORMS])
def test_readme_command(command, runner, workdir):
    short = SHORT_FORMS[command]
    if short.same_as_config_test:
        program, *args = shlex.split(replaced(command, short))
        if program == "torchrun":  # one process: what the config test's python command runs
            assert process_count([program, *args]) == 1, command
            while args[0].startswith("--"):
                args.pop(0)
        script, flag, config, *overrides = args
        assert program in ("python", "python3", "torchrun") and flag == "--config", command
        assert script == trainer_script(ROOT / config) and (ROOT / config).is_file(), command
        # the README's own overrides: each one set again by the config's short form (which comes after them)
        shortened = {o.split("=")[0] for o in config_short_form(ROOT / config, "runs", dict.fromkeys(TINY_VLM, "m"))}
        assert {o.split("=")[0] for o in overrides} <= shortened, (
            f"{command}: an override the config test's short form does not set; give it a short form of its own")
        return  # tests/test_examples.py::test_config_runs_one_update runs this very command's short form
    if short.needs:
        assert_ok(runner(short.needs), f"{short.needs} (needed by {command})")
    assert_ok(runner(command))
    for pattern in short.expect_files:
        assert list(workdir.glob(pattern)), f"{command}: nothing matches {pattern}"


@pytest.mark.parametrize("block", python_blocks(), ids=block_id)
def test_readme_python_block(block, runner):
    rules = PYTHON_BLOCKS.get(block_id(block), {})
    for old, _ in rules.get("replace", ()):
        assert old in block, f"README block changed: {old!r} not in it; update PYTHON_BLOCKS"
    expect = rules.get("expect", "isaac" if "VLA/Behavior" in block else "ok")
    result = runner(f"block:{block_id(block)}")
    if expect == "ok":
        assert_ok(result, f"README python block starting {block_id(block)!r}")
    elif expect == "isaac":
        assert result.returncode != 0 and "BehaviorUnavailableError" in result.stderr, result.stderr[-3000:]
        assert "Isaac Sim" in result.stderr and "OmniGibson" in result.stderr
    else:
        words = expect.removeprefix("error:")
        assert result.returncode != 0 and words in result.stderr, (
            f"expected an error with {words!r}, got rc={result.returncode}:\n{result.stderr[-3000:]}")
