"""Bad input to every command line (issue 30, item 5): ``trainers/{ppo,grpo,sft}.py``, ``trainers/eval.py`` and
``vla-gym demos`` each exit with one clear line that names the setting and the fix, exit code 2, no traceback,
and nothing written where the command writes (``run_dir=``, ``--out``).

One table, one bad input per case, each run as the user runs it, in a process of its own: a fresh interpreter costs
seconds of imports (torch, vla_gym) per case, so one process imports them once and forks a child per case
(:class:`Forks`), which runs the script as ``__main__`` with the user's ``sys.argv`` and ``sys.path``, its own
stdout, stderr and exit code (a traceback printed as the interpreter prints one). ``{name}`` in a case's argv is a file
the fixtures make: a CartPole PPO checkpoint (``ckpt``), a one-episode PushCube dataset (``pushcube``), an empty
directory (``empty``), a dataset directory with only ``meta/info.json`` (``info_only``), a checkpoint whose policy
names a model that is not there (``gone_model``); ``{out}`` is where the command would write, which must not exist
afterwards. The Hugging Face cases run with ``HF_HUB_OFFLINE=1`` (nothing waits on the network); every VLA example
config is checked in-process, three of them (one per model family and trainer) through their command line.
"""
from __future__ import annotations

import json
import os
import pathlib
import queue
import shutil
import signal
import string
import subprocess
import threading

import pytest
import yaml
from short_runs import ROOT, child_env, executable

CARTPOLE = "examples/configs/cartpole_ppo.yaml"
PUSHCUBE = "examples/configs/maniskill_pushcube_ppo.yaml"
LIBERO_SFT = "experiments/libero_miniature/configs/libero_object_miniature_sft.yaml"
PPO, GRPO, SFT, EVAL = "trainers/ppo.py", "trainers/grpo.py", "trainers/sft.py", "trainers/eval.py"
DEMOS = "-m vla_gym.cli demos"


def case(name, command, args, words, code=2, xfail=None, skip=None):
    marks = [pytest.mark.xfail(reason=xfail, strict=True)] if xfail else []
    marks += [pytest.mark.skip(reason=skip)] if skip else []
    return pytest.param(command, args, words, code, id=name, marks=marks)


def trainer(name, script, config, *overrides, words, **kw):
    return case(name, script, ["--config", config, "run_dir={out}", "total_timesteps=1", *overrides], words, **kw)


def evaluate(name, *args, words, **kw):
    return case(name, EVAL, [*args, "--out", "{out}", "--episodes-per-task", "1"], words, **kw)


def demos(name, env_id, *args, words, **kw):
    return case(name, DEMOS, [env_id, "--out", "{out}", "--no-progress", *args], words, **kw)


CASES = [
    # wrong types, values that cannot work, unknown keys
    trainer("ppo-n_steps-not-int", PPO, CARTPOLE, "ppo.n_steps=abc", words=["ppo.n_steps", "integer", "'abc'"]),
    trainer("ppo-lr-not-number", PPO, CARTPOLE, "ppo.learning_rate=fast", words=["ppo.learning_rate", "number"]),
    trainer("ppo-batch_size-0", PPO, CARTPOLE, "ppo.batch_size=0", words=["ppo.batch_size=0", "at least 1"]),
    trainer("ppo-unknown-key", PPO, CARTPOLE, "ppo.n_stepz=3", words=["ppo.n_stepz", "did you mean n_steps"]),
    trainer("ppo-value-not-yaml", PPO, CARTPOLE, "ppo.n_steps=[1", words=["ppo.n_steps", "quote it"]),
    trainer("grpo-group_size-0", GRPO, CARTPOLE, "grpo.group_size=0", words=["grpo.group_size=0", "at least 1"]),
    trainer("sft-batch_size-not-int", SFT, LIBERO_SFT, "sft.batch_size=big", words=["sft.batch_size", "integer"]),
    # envs: unknown ids, keyword arguments the env rejects
    trainer("ppo-unknown-gym-id", PPO, CARTPOLE, "env.id=Nope-v1", words=["env.id=Nope-v1", "vla-gym list"]),
    trainer("ppo-unknown-vla-id", PPO, PUSHCUBE, "env.id=VLA/ManiSkill-PushCub-v0",
            words=["env.id", "VLA/ManiSkill-PushCub-v0", "vla-gym list"]),
    trainer("ppo-obs_mode-rgb", PPO, PUSHCUBE, "env.kwargs.obs_mode=rgb",
            words=["env.kwargs.obs_mode=rgb", "'images', 'state'"]),
    trainer("ppo-unknown-env-kwarg", PPO, CARTPOLE, "env.kwargs.foo=1", words=["env.kwargs.foo=1", "drop"]),
    trainer("ppo-num_envs-0", PPO, CARTPOLE, "env.num_envs=0", words=["env.num_envs=0", "at least 1"]),
    trainer("ppo-device-cuda-without-gpu", PPO, CARTPOLE, "device=cuda", words=["device=cuda", "device=cpu"],
            skip="a CUDA machine" if shutil.which("nvidia-smi") else None),
    # policies
    trainer("ppo-unknown-policy", PPO, CARTPOLE, "policy.name=bogus", words=["policy.name=bogus", "registered"]),
    trainer("ppo-unknown-policy-kwarg", PPO, CARTPOLE, "policy.kwargs.foo=1", words=["policy.kwargs.foo", "accepted"]),
    # missing files
    case("ppo-missing-config", PPO, ["--config", "nope.yaml", "run_dir={out}"], ["--config nope.yaml", "examples"]),
    trainer("ppo-missing-init_checkpoint", PPO, CARTPOLE, "ppo.init_checkpoint=nope.pt",
            words=["ppo.init_checkpoint=nope.pt", "no such file"]),
    trainer("ppo-missing-resume", PPO, CARTPOLE, "checkpoint.resume=nope.pt",
            words=["checkpoint.resume=nope.pt", "checkpoint.resume=null"]),
    trainer("sft-missing-dataset", SFT, LIBERO_SFT, "sft.dataset=/nonexistent",
            words=["sft.dataset=/nonexistent", "vla-gym demos"]),
    evaluate("eval-missing-checkpoint", "--checkpoint", "nope.pt", words=["--checkpoint", "nope.pt"]),
    evaluate("eval-not-a-checkpoint", "--checkpoint", CARTPOLE, words=["--checkpoint", "cannot read checkpoint"]),
    # empty datasets, a dataset of another env
    trainer("sft-empty-dataset-dir", SFT, LIBERO_SFT, "sft.dataset={empty}",
            words=["sft.dataset=", "meta/info.json", "vla-gym demos"]),
    trainer("sft-dataset-without-episodes", SFT, LIBERO_SFT, "sft.dataset={info_only}",
            words=["sft.dataset=", "tasks.parquet", "vla-gym demos"]),
    trainer("sft-dataset-of-another-env", SFT, LIBERO_SFT, "sft.dataset={pushcube}",
            words=["sft.dataset=", "VLA/ManiSkill-PushCube-v0", "vla-gym demos VLA/LiberoObject-v0"]),
    # a checkpoint of another policy or another env
    trainer("ppo-init-of-another-policy", PPO, CARTPOLE, "ppo.init_checkpoint={ckpt}", "policy.name=cnn",
            words=["ppo.init_checkpoint=", "'mlp' policy", "policy.name=mlp"]),
    trainer("grpo-init-of-another-policy", GRPO, CARTPOLE, "grpo.init_checkpoint={ckpt}", "policy.name=cnn",
            words=["grpo.init_checkpoint=", "'mlp' policy", "policy.name=mlp"]),
    trainer("ppo-init-of-other-sizes", PPO, CARTPOLE, "ppo.init_checkpoint={ckpt}", "policy.kwargs.hidden_sizes=[32]",
            words=["ppo.init_checkpoint=", "another policy", "policy.kwargs"]),
    trainer("ppo-resume-into-another-env", PPO, CARTPOLE, "env.id=Pendulum-v1", "checkpoint.resume={ckpt}",
            words=["checkpoint.resume", "state of shape [4]"]),
    # trainers/eval.py
    evaluate("eval-unknown-key", "--checkpoint", "{ckpt}", "ppo.n_stepz=3", words=["ppo.n_stepz", "n_steps"]),
    evaluate("eval-unknown-env-kwarg", "--checkpoint", "{ckpt}", "env.kwargs.foo=1", words=["env.kwargs.foo=1"]),
    evaluate("eval-unknown-env-id", "--checkpoint", "{ckpt}", "env.id=Nope-v1", words=["env.id=Nope-v1"]),
    evaluate("eval-num-envs-0", "--checkpoint", "{ckpt}", "--num-envs", "0", words=["--num-envs"]),
    evaluate("eval-repeats-greedy", "--checkpoint", "{ckpt}", "--repeats", "3", words=["--repeats", "--stochastic"]),
    evaluate("eval-repeats-0", "--checkpoint", "{ckpt}", "--stochastic", "--repeats", "0", words=["--repeats"]),
    evaluate("eval-policy-override", "--checkpoint", "{ckpt}", "policy.name=cnn", words=["policy.name"]),
    evaluate("eval-model-not-here", "--checkpoint", "{gone_model}", words=["policy.kwargs.model=/path/to/pi0"]),
    # vla-gym demos
    demos("demos-unknown-env", "VLA/Nope-v0", words=["VLA/Nope-v0", "vla-gym list"]),
    demos("demos-episodes-0", "VLA/ManiSkill-PushCube-v0", "--episodes-per-task", "0",
          words=["--episodes-per-task", "got 0"]),
    demos("demos-episodes-not-int", "VLA/ManiSkill-PushCube-v0", "--episodes-per-task", "abc",
          words=["--episodes-per-task", "'abc'"]),
    demos("demos-obs_mode-rgb", "VLA/ManiSkill-PushCube-v0", "--episodes-per-task", "1", "--env-kwarg", "obs_mode=rgb",
          words=["obs_mode", "'rgb'", "--env-kwarg obs_mode"]),
    demos("demos-task-out-of-range", "VLA/LiberoObject-v0", "--tasks", "99", words=["--tasks", "0..9"]),
]

#: every example config whose policy loads a Hugging Face model, and three of them (each model family, each
#: trainer) that also run through their command line
HF_CONFIGS = sorted(p for p in (ROOT / "examples" / "configs").glob("*.yaml")
                    if "model" in ((yaml.safe_load(p.read_text()).get("policy") or {}).get("kwargs") or {}))
HF_COMMANDS = ["libero_pi0_sft.yaml", "maniskill_vla_tokens_ppo.yaml", "maniskill_vla_oft_grpo.yaml"]


#: what every command imports: loaded once by the fork server, before any case runs
PRELOAD = ["torch", "gymnasium", "yaml", "vla_gym", "vla_gym.trainers.ppo", "vla_gym.trainers.grpo",
           "vla_gym.trainers.sft", "vla_gym.trainers.eval", "vla_gym.trainers.runtime.launch"]

#: the fork server (run with ``python -c``): imports PRELOAD, then per request line (JSON: argv, stdout and stderr
#: files) forks a child that runs the command as ``python ARGV`` would, and answers its pid, then its exit code
SERVER = r"""
import atexit, importlib, json, os, runpy, sys, traceback

def child(request, base_path):
    code = 70
    try:
        os.setsid()
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        argv = request["argv"]
        if argv[0] == "-m":  # python -m MODULE: the working directory first on sys.path
            sys.path[:] = [os.getcwd(), *base_path]
            sys.argv = [argv[1], *argv[2:]]
            run = lambda: runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:  # python SCRIPT: the script's directory first on sys.path
            script = os.path.abspath(argv[0])
            sys.path[:] = [os.path.dirname(script), *base_path]
            sys.argv = list(argv)
            run = lambda: runpy.run_path(script, run_name="__main__")
        try:
            run()
            code = 0
        except SystemExit as exc:
            code = 0 if exc.code is None else exc.code
            if not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        try:
            atexit._run_exitfuncs()
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)

def serve(preload, tests):
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    base_path = [p for p in sys.path if p not in ("", tests)]
    for name in preload:
        importlib.import_module(name)
    answers.write("ready\n")
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(request, base_path)
        answers.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
"""


class Forks:
    """A process that imported what the commands import; :meth:`run` forks a child of it per command."""

    def __init__(self, directory: pathlib.Path):
        self.directory = directory
        self.count = 0
        code = f"{SERVER}\nserve({PRELOAD!r}, {str(ROOT / 'tests')!r})"
        self.server = subprocess.Popen([*executable("python"), "-c", code], cwd=ROOT, env=self.env(),
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.answers: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.answer(300) == "ready", "the fork server did not start"

    def _read(self) -> None:
        for line in self.server.stdout:
            self.answers.put(line.strip())

    @staticmethod
    def env() -> dict[str, str]:
        return {**child_env(), "HF_HUB_OFFLINE": "1"}

    def answer(self, timeout: float) -> str | None:
        try:
            return self.answers.get(timeout=timeout)
        except queue.Empty:
            return None

    def run(self, argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
        """``python ARGV`` in a forked child: its exit code, stdout and stderr."""
        self.count += 1
        out, err = (self.directory / f"{self.count}.{name}" for name in ("out", "err"))
        self.server.stdin.write(json.dumps({"argv": argv, "stdout": str(out), "stderr": str(err)}) + "\n")
        self.server.stdin.flush()
        pid = json.loads(self.answer(60))["pid"]
        answer = self.answer(timeout)
        if answer is None:  # hung: killed, and reported as a failure of the case
            os.killpg(pid, signal.SIGKILL)
            answer = self.answer(60)
        return subprocess.CompletedProcess(argv, json.loads(answer)["code"], out.read_text(), err.read_text())

    def close(self) -> None:
        self.server.stdin.close()
        self.server.wait(60)


@pytest.fixture(scope="module")
def forks(tmp_path_factory):
    server = Forks(tmp_path_factory.mktemp("forks"))
    yield server
    server.close()


def run(forks: Forks, command: str, args: list[str]) -> subprocess.CompletedProcess:
    return forks.run([*(command.split() if command.startswith("-m") else [command]), *args])


def assert_one_clear_line(result: subprocess.CompletedProcess, code: int, words: list[str], out: pathlib.Path):
    stderr = result.stderr
    assert "Traceback" not in stderr, f"a traceback instead of one clear line:\n{stderr[-4000:]}"
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, f"exit {result.returncode} without a word on stderr; stdout:\n{result.stdout[-2000:]}"
    last = lines[-1]
    missing = [word for word in words if word not in last]
    assert not missing, f"{missing} not in the last line of stderr:\n{last}\n(stderr:\n{stderr[-3000:]})"
    assert result.returncode == code, f"exit {result.returncode}, not {code}:\n{stderr[-3000:]}"
    assert not out.exists(), f"left behind: {sorted(str(p) for p in out.rglob('*'))[:10] or out}"


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> pathlib.Path:
    """A CartPole PPO checkpoint (MLP policy, 4-D state): one tiny update."""
    from vla_gym.trainers import PPO

    path = tmp_path_factory.mktemp("ckpt") / "cartpole.pt"
    PPO("mlp", "CartPole-v1", num_envs=2, n_steps=4, batch_size=8, n_epochs=1, policy_kwargs={"hidden_sizes": [8]},
        device="cpu").learn(8).save(path)
    return path


@pytest.fixture(scope="module")
def gone_model(checkpoint) -> pathlib.Path:
    """The CartPole checkpoint relabelled as a PI0 policy whose model is the example configs' placeholder."""
    import torch

    state = torch.load(checkpoint, weights_only=False)
    state["policy_name"], state["policy_kwargs"] = "pi0", {"model": "/path/to/pi0"}
    state["config"]["policy"] = {"name": "pi0", "kwargs": {"model": "/path/to/pi0"}}
    path = checkpoint.with_name("pi0_gone.pt")
    torch.save(state, path)
    return path


@pytest.fixture(scope="module")
def pushcube(tmp_path_factory, forks) -> pathlib.Path:
    """A one-episode PushCube demo dataset, main camera at 32 px (`vla-gym demos`)."""
    out = tmp_path_factory.mktemp("pushcube") / "demos"
    result = run(forks, DEMOS, ["VLA/ManiSkill-PushCube-v0", "--episodes-per-task", "1", "--cameras", "main",
                                "--image-size", "32", "--no-progress", "--out", str(out)])
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def empty(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("empty")


@pytest.fixture(scope="module")
def info_only(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("info_only")
    (root / "meta").mkdir()
    (root / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v3.0", "fps": 10, "features": {}}))
    return root


# --------------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("command, args, words, code", CASES)
def test_bad_input_exits_with_one_clear_line_and_writes_nothing(command, args, words, code, request, tmp_path, forks):
    out = tmp_path / "out"
    needed = {field for arg in args for _, field, _, _ in string.Formatter().parse(arg) if field and field != "out"}
    files = {name: request.getfixturevalue("checkpoint" if name == "ckpt" else name) for name in needed}
    args = [arg.format(out=out, **files) for arg in args]
    assert_one_clear_line(run(forks, command, args), code, words, out)


@pytest.mark.quick
@pytest.mark.parametrize("path", HF_CONFIGS, ids=lambda p: p.name)
def test_every_vla_example_config_names_its_missing_model(path, monkeypatch):
    """In-process, fast: the check the trainers run before anything is built, offline (for an env whose simulator
    is not installed here, BEHAVIOR's, the trainers name the simulator first: tests/test_examples.py)."""
    from vla_gym.core.registry import check_env_id
    from vla_gym.trainers.runtime.config import ConfigError, load_config
    from vla_gym.trainers.runtime.config_checks import check_config, check_policy

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = load_config(path)
    _skip_if_cached(cfg.policy.kwargs["model"])
    runs_here = check_env_id(cfg.env.id).available()
    with pytest.raises(ConfigError, match=r"^policy\.kwargs\.model=\S+ .*: pass a local directory") as caught:
        if runs_here:
            check_config(cfg, path.stem.rsplit("_", 1)[1])
        else:
            check_config(cfg, path.stem.rsplit("_", 1)[1])  # nothing to say yet: the simulator's error comes first
            check_policy(cfg.policy)
    assert "\n" not in str(caught.value)
    if str(cfg.policy.kwargs["model"]).startswith("/path/to/"):
        assert "placeholder" in str(caught.value)


@pytest.mark.parametrize("name", HF_COMMANDS)
def test_vla_example_config_without_its_model_exits_at_once(name, tmp_path, forks):
    path = ROOT / "examples" / "configs" / name
    model = yaml.safe_load(path.read_text())["policy"]["kwargs"]["model"]
    _skip_if_cached(model)
    out = tmp_path / "out"
    script = f"trainers/{path.stem.rsplit('_', 1)[1]}.py"
    result = run(forks, script, ["--config", str(path), f"run_dir={out}", "total_timesteps=1"])
    assert_one_clear_line(result, 2, [f"policy.kwargs.model={model}", "policy.kwargs.model=/path/to/model"], out)


@pytest.mark.quick
def test_placeholder_and_unreachable_hub_fail_fast_without_the_offline_switch(monkeypatch):
    """No HF_HUB_OFFLINE: a placeholder path never asks the hub; a hub name that is not cached asks once, with a
    timeout, and an unreachable hub is one clear error (here: the hub is made unreachable)."""
    import time

    from vla_gym.trainers.policies import pretrained

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(pretrained, "_cached", lambda name: False)
    with pytest.raises(pretrained.PretrainedModelError, match="placeholder"):
        pretrained.require_pretrained("/path/to/pi0")
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    start = time.perf_counter()
    with pytest.raises(pretrained.PretrainedModelError, match="the hub cannot be reached: pass a local directory"):
        pretrained.require_pretrained("google/paligemma-3b-pt-224")
    assert time.perf_counter() - start < 2 * pretrained.HUB_TIMEOUT_S


@pytest.mark.quick
def test_a_run_that_fails_before_its_first_update_leaves_no_directory(tmp_path):
    """TrainingRun.discard: the folders this run made go; a directory that existed, or holds a checkpoint, stays."""
    import torch

    from vla_gym.trainers.runtime.config import config_from_dict
    from vla_gym.trainers.runtime.distributed import Distributed
    from vla_gym.trainers.runtime.run import TrainingRun

    dist = Distributed(device=torch.device("cpu"))
    cfg = config_from_dict({"run_dir": str(tmp_path / "new" / "runs"), "name": "x"})
    run = TrainingRun(cfg, dist, cfg.path)
    run.open()
    assert (cfg.path / "config.yaml").exists() and run.discard() and not (tmp_path / "new").exists()
    cfg.run_dir = str(tmp_path)
    run = TrainingRun(cfg, dist, cfg.path)
    run.open()
    run.checkpointer.save({"x": 1}, update=1)
    assert not run.discard() and (cfg.path / "config.yaml").exists()
    run = TrainingRun(cfg, dist, cfg.path)  # the directory exists now: never removed
    run.open()
    (cfg.path / "checkpoints" / "ckpt_00000001.pt").unlink()
    assert not run.discard() and cfg.path.exists()


def _skip_if_cached(model: str) -> None:
    from vla_gym.trainers.policies.pretrained import _cached, _is_hub_name

    if pathlib.Path(model).is_dir() or (_is_hub_name(model) and _cached(model)):
        pytest.skip(f"{model} is on this machine: the config would train")
