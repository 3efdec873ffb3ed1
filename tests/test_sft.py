"""trainers/sft.py: behaviour cloning from a LeRobot v3 demo dataset for every policy family, its checkpoint
into GRPO, resume, torchrun, and every ``examples/configs/*_sft.yaml`` in short form through the real entry point.

Datasets are recorded here by ``vla_gym.data.record`` on the real simulators: real PushCube expert episodes,
and (for the LIBERO configs' short forms) one 8-step LIBERO-Spatial episode kept whatever its outcome.

The configs' short forms and the command-line errors run one after another in one driver process
(tests/config_driver.py: ``trainers/sft.py`` executed as ``__main__`` with each command's argv, output and exit code
captured as a subprocess's); SFT on two processes runs under a real ``torchrun``.
"""
from __future__ import annotations

import pathlib
import subprocess

import numpy as np
import pytest
import torch

pytest.importorskip("pyarrow")
pytest.importorskip("transformers")

from config_driver import Job, run_jobs  # noqa: E402
from short_runs import ROOT, SHORT_IMAGE_SIZE, TINY_VLM, child_env, executable, free_port, tiny_vlms  # noqa: E402

from vla_gym.trainers.runtime.config import load_config  # noqa: E402

CONFIGS = sorted((ROOT / "examples" / "configs").glob("*_sft.yaml"))
PUSHCUBE = "VLA/ManiSkill-PushCube-v0"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """Short datasets by env id, recorded on first use: {env_id: directory}."""
    from vla_gym.data.record import record_demos

    root, made = tmp_path_factory.mktemp("demos"), {}

    def get(env_id: str, cameras: list[str], env_kwargs: dict | None = None) -> str:
        if env_id not in made:
            out = root / env_id.replace("/", "_")
            if env_id.startswith("VLA/MetaWorld"):  # state configs: recorded with the config's own env kwargs
                pytest.importorskip("metaworld")
                record_demos(env_id, out, episodes_per_task=1, task_ids=[0], keep_failures=True, progress=False,
                             max_episode_steps=8, **(env_kwargs or {}))
            elif env_id.startswith("VLA/ManiSkill"):
                pytest.importorskip("mani_skill")
                record_demos(env_id, out, episodes_per_task=3, noise=0.3, seed=0, progress=False,
                             cameras=cameras, image_size=SHORT_IMAGE_SIZE)
            else:
                pytest.importorskip("libero")
                record_demos(env_id, out, episodes_per_task=1, task_ids=[0], keep_failures=True, progress=False,
                             cameras=cameras, image_size=SHORT_IMAGE_SIZE, max_episode_steps=8)
            made[env_id] = str(out)
        return made[env_id]

    return get


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_vlms(tmp_path_factory.mktemp("models"))


def sft_short_form(config: pathlib.Path, run_dir, dataset: str, models: dict, nproc: int = 1) -> list[str]:
    """Overrides that shrink an SFT config to two optimizer steps on a short dataset (tiny VLMs for big ones)."""
    cfg = load_config(config)
    overrides = [f"run_dir={run_dir}", "device=cpu", "torch_threads=1", f"sft.dataset={dataset}", "sft.max_steps=2",
                 f"sft.batch_size={4 * nproc}", f"env.kwargs.image_size={SHORT_IMAGE_SIZE}",
                 "env.kwargs.max_episode_steps=8", "eval.episodes=0", "eval.video=false",
                 "logging.progress_bar=false", "checkpoint.resume=null"]
    if cfg.policy.name in TINY_VLM:
        overrides += [f"policy.kwargs.model={models[cfg.policy.name]}", "policy.kwargs.dtype=float32"]
        if "lora" in cfg.policy.kwargs:
            overrides.append("policy.kwargs.lora.rank=4")
    return overrides


#: command-line errors of trainers/sft.py: (overrides, words of the one-line error); the dataset's path is relative
#: to ``{tmp}``, a folder of the test's
COMMAND_LINE_ERRORS = {
    "no_dataset": (["sft.dataset={tmp}/none"], "vla-gym demos"),
    "fsdp": (["sft.dataset=data/x", "distributed.strategy=fsdp"], "distributed.strategy=ddp"),
}


@pytest.fixture(scope="module")
def sft_commands(datasets, models, tmp_path_factory):
    """``(job id) -> CompletedProcess`` of every SFT config's short form (id: the config's stem; its run directory
    ``.runs / stem``) and of every COMMAND_LINE_ERRORS case, all run by one driver process on first use."""
    base = tmp_path_factory.mktemp("sft_commands")
    results: dict = {}
    skipped: dict[str, str] = {}

    def jobs() -> list[Job]:
        made = []
        for config in CONFIGS:
            cfg = load_config(config)
            try:
                dataset = datasets(cfg.env.id, cfg.env.kwargs.get("cameras", ["main"]), dict(cfg.env.kwargs))
            except pytest.skip.Exception as exc:  # its simulator is not installed
                skipped[config.stem] = str(exc)
                continue
            made.append(Job(config.stem, ["python", "trainers/sft.py", "--config", str(config),
                                          *sft_short_form(config, base / "runs" / config.stem, dataset, models)]))
        config = ROOT / "examples" / "configs" / "maniskill_small_sft.yaml"
        for case, (overrides, _) in COMMAND_LINE_ERRORS.items():
            made.append(Job(f"error:{case}", ["python", "trainers/sft.py", "--config", str(config),
                                              *(o.replace("{tmp}", str(base)) for o in overrides)]))
        return made

    def result(job_id: str):
        if not results:
            results.update(run_jobs(jobs(), base / "driver"))
        if job_id in skipped:
            pytest.skip(skipped[job_id])
        return results[job_id]

    result.runs = base / "runs"
    return result


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_every_sft_config_runs_in_short_form(config, sft_commands, models):
    from vla_gym.trainers.runtime.checkpoint import load_policy

    cfg = load_config(config)
    result = sft_commands(config.stem)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    run = sft_commands.runs / config.stem / cfg.name
    final = run / "final.pt"
    assert final.exists() and "final.pt" in result.stdout
    assert list((run / "tensorboard").iterdir())
    overrides = {"model": models[cfg.policy.name]} if cfg.policy.name in TINY_VLM else {}
    state = torch.load(final, weights_only=False)
    state["policy_kwargs"].update(overrides)
    policy = load_policy(state)  # what trainers/eval.py and GRPO rebuild from the checkpoint
    action_dim = 4 if cfg.env.id.startswith("VLA/MetaWorld") else 7  # Meta-World's own 4-D action
    assert state["algo"] == "sft" and state["counters"]["num_updates"] == 2 and policy.action_space.shape[-1] == action_dim


def _sft_config(tmp_path, dataset: str, *extra: str):
    return load_config(ROOT / "examples" / "configs" / "maniskill_small_sft.yaml", [
        f"run_dir={tmp_path}", "device=cpu", f"sft.dataset={dataset}", "sft.batch_size=16",
        f"env.kwargs.image_size={SHORT_IMAGE_SIZE}", "env.kwargs.max_episode_steps=8", "eval.video=false",
        "logging.progress_bar=false", *extra])


def test_sft_loss_falls_checkpoint_resumes_and_starts_grpo(datasets, tmp_path):
    from vla_gym.trainers.grpo import GRPO
    from vla_gym.trainers.sft import SFT

    dataset = datasets(PUSHCUBE, ["main"])
    # periodic evaluation in the env every 10 steps (one short greedy episode), checkpoints every 10 steps
    sft = SFT.from_config(_sft_config(tmp_path, dataset, "sft.max_steps=30", "eval.every=10", "eval.episodes=1",
                                      "checkpoint.every=10"))
    obs, actions = sft.load_batch(list(range(len(sft.data))))
    with torch.no_grad():
        before = sft.model(obs, actions).item()
    sft.learn()
    with torch.no_grad():
        after = sft.model(obs, actions).item()
    sft.close()
    assert after < 0.5 * before, (before, after)  # behaviour cloning fits the expert's actions
    run = tmp_path / "maniskill_small_sft"
    assert (run / "eval" / "eval.md").exists() and sft.last_eval["overall"]["episodes"] == 1
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["ckpt_00000020.pt", "ckpt_00000030.pt"]

    # a longer run of the same config resumes from step 30 with the same weights
    resumed = SFT.from_config(_sft_config(tmp_path, dataset, "sft.max_steps=32", "eval.episodes=0"))
    resumed.learn()
    resumed.close()
    assert resumed.num_updates == 32 and resumed.frames_seen == 32 * 16

    # GRPO starts from the SFT checkpoint (grpo.init_checkpoint) and takes one update with a full group
    grpo_cfg = load_config(ROOT / "examples" / "configs" / "maniskill_small_grpo.yaml", [
        f"run_dir={tmp_path}", "device=cpu", f"grpo.init_checkpoint={run / 'final.pt'}", "grpo.group_size=2",
        "grpo.groups_per_update=1", "grpo.batch_size=16", "grpo.n_epochs=1", "env.num_envs=1",
        f"env.kwargs.image_size={SHORT_IMAGE_SIZE}", "env.kwargs.max_episode_steps=8", "eval.episodes=0",
        "logging.progress_bar=false", "total_timesteps=1", "checkpoint.resume=null"])
    final = torch.load(run / "final.pt", weights_only=False)
    grpo = GRPO.from_config(grpo_cfg, write_run=False)
    try:
        loaded = grpo.policy.state_dict()
        assert loaded.keys() == final["policy"].keys()
        for key, value in final["policy"].items():
            torch.testing.assert_close(loaded[key], value)
        np.testing.assert_allclose(loaded["action_head.log_std"].numpy(), -1.6)  # the config's RL noise, carried
        grpo.learn()
        assert grpo.num_updates == 1 and grpo.num_timesteps > 0
    finally:
        grpo.close()


@pytest.mark.parametrize("family", ["cnn", "small", *TINY_VLM])
def test_every_policy_family_clones_action_chunks(family, datasets, models, tmp_path):
    """One batch of 4-step chunks, a few steps: each family's own imitation loss falls (tokens: cross-entropy,
    OFT: L1, PI0: flow matching, small: MSE of the mean, cnn: negative log-likelihood)."""
    from vla_gym.trainers.sft import SFT

    names = {"cnn": "cnn", "small": "vla_gym.trainers.policies.vla_small:SmallVLAPolicy"}
    name = names.get(family, family)
    kwargs = {"model": models[name], "dtype": "float32", "critic": False} if name in TINY_VLM else {}
    if name in ("vla_gym.trainers.policies.vla_tokens:ActionTokenVLAPolicy",
                "vla_gym.trainers.policies.vla_continuous:ContinuousVLAPolicy"):
        kwargs["lora"] = {"rank": 4}
    if name == "vla_gym.trainers.policies.vla_pi0:PI0Policy":
        kwargs.update(freeze_vlm=True, cameras=["main"])
    dataset = datasets(PUSHCUBE, ["main"])
    cfg = _sft_config(tmp_path, dataset, f"policy.name={name}", "sft.max_steps=6", "sft.batch_size=8",
                      "sft.learning_rate=3e-3", "eval.episodes=0", "env.wrappers=[{name: ActionChunk, kwargs: {chunk_size: 4}}]")
    cfg.policy.kwargs = kwargs
    sft = SFT.from_config(cfg, write_run=False)
    rows = list(range(8))
    sft.batch_rows = lambda update: rows  # the same batch every step: its loss must fall
    obs, actions = sft.load_batch(rows)
    assert actions.shape == (8, 4, 7)
    torch.manual_seed(0)
    with torch.no_grad():
        before = sft.model(obs, actions).item()
    sft.learn()
    torch.manual_seed(0)  # PI0's loss draws noise and times: the same draws before and after
    with torch.no_grad():
        after = sft.model(obs, actions).item()
    sft.close()
    assert after < before, (family, before, after)


def test_sft_under_torchrun_two_processes(datasets, tmp_path):
    config = ROOT / "examples" / "configs" / "maniskill_small_sft.yaml"
    dataset = datasets(PUSHCUBE, ["main"])
    result = subprocess.run(
        [*executable("torchrun"), "--nproc_per_node=2", f"--master_port={free_port()}", "trainers/sft.py",
         "--config", str(config), *sft_short_form(config, tmp_path, dataset, {}, nproc=2), "checkpoint.every=1"],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    state = torch.load(tmp_path / "maniskill_small_sft" / "final.pt", weights_only=False)
    assert state["counters"]["frames_seen"] == 2 * 8 and len(state["rng"] or []) == 0  # final.pt: no RNG states
    checkpoint = torch.load(tmp_path / "maniskill_small_sft" / "checkpoints" / "ckpt_00000002.pt", weights_only=False)
    assert len(checkpoint["rng"]) == 2  # one RNG state per rank


def test_sft_command_line_errors_name_the_fix(sft_commands):
    """Through launch.train_main: a missing dataset and an unsupported strategy stop with exit code 2 and a message."""
    for case, (_, words) in COMMAND_LINE_ERRORS.items():
        result = sft_commands(f"error:{case}")
        assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr, result.stderr
