"""Every config in examples/configs/, every script in examples/ and every benchmark runs, in a short form.

Each runs as a user runs it (``python trainers/ppo.py --config examples/configs/X.yaml key=value ...``) with
overrides from tests/short_runs.py that make it one update on one env with tiny models, and must end with a
checkpoint. Configs whose simulator cannot run here (BEHAVIOR-1K needs Isaac Sim) must stop with the error that says
what is missing, not a traceback.

The commands of one simulator family run one after another in one driver process (tests/config_driver.py: each
command's script executed as ``__main__`` with its argv, its output and exit code captured as a subprocess's would
be): one interpreter start-up, one import of torch and the simulator, instead of one per command. Each test asserts
its own command's result. What a trainer started under torchrun does is tested by tests/test_torchrun.py, and by the
README's main job (tests/test_readme.py).

Not here, on purpose (each is run by its own test; this file fails for a script that no test file names):
- ``examples/configs/*_sft.yaml``: supervised fine-tuning configs, run by tests/test_sft.py;
- ``examples/sft_then_rl.py``: tests/test_vla_demos.py runs its short form;
- benchmarks whose own test runs a short form (bench_ppo_cartpole, bench_ppo_maniskill, bench_grpo_maniskill, ...).
"""
from __future__ import annotations

import json

import pytest
import yaml
from config_driver import Job, run_jobs
from short_runs import (
    ROOT,
    TINY_VLM,
    assert_clear_error,
    assert_ok,
    checkpoints,
    config_short_form,
    executable,
    run_command,
    simulator,
    tiny_vlms,
    trainer_script,
)

CONFIGS = sorted(path.name for path in (ROOT / "examples" / "configs").glob("*.yaml"))
#: SFT configs run through trainers/sft.py in tests/test_sft.py (another test owns them)
SFT_CONFIG_SUFFIX = "_sft.yaml"
#: examples/ scripts -> the flags of their short form
SCRIPTS = {
    "examples/sb3_ppo.py": ["--env-id", "VLA/ManiSkill-PushCube-v0", "--steps", "64", "--n-steps", "64"],
}
#: benchmarks/ scripts -> the flags of their short form (they measure nothing at this size: they must run)
BENCHMARKS = {
    "benchmarks/bench_action_chunk.py": ["--image-size", "64", "--chunk-size", "2", "--chunks", "1"],
    "benchmarks/bench_libero.py": ["--steps", "2", "--rounds", "1", "--resets", "1", "--size", "64"],
    "benchmarks/bench_maniskill.py": ["--modes", "state", "images", "--size", "32", "--episodes", "1", "--steps", "5"],
    "benchmarks/bench_pipeline.py": ["--quick"],
}
#: GPU-only: without CUDA they must stop at once with a message that says so (the words checked)
GPU_ONLY = {
    "benchmarks/bench_vla_gpu.py": (["--env", "synthetic"], ["no CUDA device", "--size tiny"]),
    "benchmarks/bench_maniskill.py": (["--gpu"], ["--gpu needs a CUDA device"]),
}


#: the driver process each script's short form runs in (the simulator it starts): "maniskill" (also CartPole, the
#: BEHAVIOR configs' error and the GPU-only guards) or "mujoco" (LIBERO, Meta-World)
SCRIPT_GROUP = {
    "examples/sb3_ppo.py": "maniskill", "benchmarks/bench_maniskill.py": "maniskill",
    "benchmarks/bench_action_chunk.py": "mujoco", "benchmarks/bench_libero.py": "mujoco",
    "benchmarks/bench_pipeline.py": "mujoco",
}


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    return tiny_vlms(tmp_path_factory.getbasetemp())


def config_group(config: str) -> str:
    env_id = yaml.safe_load((ROOT / "examples" / "configs" / config).read_text())["env"]["id"]
    return "mujoco" if simulator(env_id) in ("libero", "metaworld") else "maniskill"


def config_job(config: str, runs, models_of) -> Job:
    """``python trainers/<algo>.py --config examples/configs/<config> <its short form>`` (run directory:
    ``runs / config``); a BEHAVIOR config as written."""
    path = ROOT / "examples" / "configs" / config
    data = yaml.safe_load(path.read_text())
    command = ["python", trainer_script(path), "--config", f"examples/configs/{config}"]
    if simulator(data["env"]["id"]) == "behavior":  # as written (only the run directory moved)
        return Job(config, [*command, f"run_dir={runs / config}"])
    models = models_of() if data.get("policy", {}).get("name") in TINY_VLM else {}
    return Job(config, [*command, *config_short_form(path, runs / config, models)])


def short_form_jobs(group: str, runs, models_of, unbuilt: dict) -> list[Job]:
    """The short forms of every command of ``group``, a job each (ids: the config's file name, or
    ``script:<path>`` / ``gpu:<path>``). A config with no short form goes into ``unbuilt`` (its test raises)."""
    jobs = []
    if group == "maniskill":
        import torch

        if not torch.cuda.is_available():  # first: they stop at once
            jobs += [Job(f"gpu:{script}", ["python", script, *flags]) for script, (flags, _) in sorted(GPU_ONLY.items())]
    for config in CONFIGS:
        try:
            if not config.endswith(SFT_CONFIG_SUFFIX) and config_group(config) == group:
                jobs.append(config_job(config, runs, models_of))
        except AssertionError as exc:  # tests/short_runs.py cannot shrink it: that config's test says what to add
            unbuilt[config] = exc
    jobs += [Job(f"script:{script}", ["python", script, *flags])
             for script, flags in sorted({**SCRIPTS, **BENCHMARKS}.items()) if SCRIPT_GROUP[script] == group]
    return jobs


@pytest.fixture(scope="module")
def results(request, tmp_path_factory):
    """``(job id) -> its CompletedProcess``, and ``.runs`` (each config's run directory is ``runs / config``): the
    first test of a group runs the group's driver, every short form of that simulator in one process."""
    base = tmp_path_factory.mktemp("short_forms")
    done: dict = {}
    unbuilt: dict[str, AssertionError] = {}

    def result(job_id: str, group: str):
        if not (base / group).exists():
            jobs = short_form_jobs(group, base / "runs", lambda: request.getfixturevalue("models"), unbuilt)
            done.update(run_jobs(jobs, base / group))
        if job_id in unbuilt:
            raise unbuilt[job_id]
        return done[job_id]

    result.runs = base / "runs"
    return result


def test_every_example_file_is_tested():
    """A script or benchmark gets a short form here, or another test file runs it (e.g. tests/test_vla_demos.py
    runs examples/sft_then_rl.py, tests/test_trainers_ppo.py benchmarks/bench_ppo_cartpole.py); every config is
    parametrized below, and one this file cannot shrink fails there, naming what to add."""
    here = {*SCRIPTS, *BENCHMARKS, *GPU_ONLY}
    assert set(SCRIPT_GROUP) == {*SCRIPTS, *BENCHMARKS}, "name the driver group of each script in SCRIPT_GROUP"
    others = "".join(path.read_text() for path in (ROOT / "tests").glob("test_*.py") if path.name != "test_examples.py")
    for folder in ("examples", "benchmarks"):
        scripts = {f"{folder}/{path.name}" for path in (ROOT / folder).glob("*.py")
                   if '__name__ == "__main__"' in path.read_text()}  # drivers the scripts share are not run
        # named by its path, or by its quoted stem (a test that loads benchmarks/{name}.py)
        missing = sorted(script for script in scripts - here
                         if script not in others and f'"{script.split("/")[1][:-3]}"' not in others)
        assert not missing, f"add a short form to tests/test_examples.py for: {', '.join(missing)}"


@pytest.mark.quick
def test_rl_configs_cache_one_updates_frames_not_hours_of_them():
    """A frozen encoder's feature cache pays for itself in SFT (each demo frame read every epoch); an RL update
    reads its own rollouts only, so an RL config caches about one update's frames. At 40-64 KB a frame, the
    100,000 entries the LIBERO GRPO config held grew its trainer 270 MB per hour (docs/reliability.md)."""
    import yaml

    for name in CONFIGS:
        config = yaml.safe_load((ROOT / "examples" / "configs" / name).read_text())
        cache = (config.get("policy", {}).get("kwargs") or {}).get("feature_cache")
        if cache is not None and ("ppo" in config or "grpo" in config):
            assert cache <= 16384, f"{name}: policy.kwargs.feature_cache={cache} holds hours of rollout frames"


@pytest.mark.parametrize("config", CONFIGS)
def test_config_runs_one_update(config, results):
    if config.endswith(SFT_CONFIG_SUFFIX):
        assert (ROOT / "tests" / "test_sft.py").exists(), f"{config} is an SFT config: tests/test_sft.py must run it"
        pytest.skip("SFT config: run by tests/test_sft.py")
    data = yaml.safe_load((ROOT / "examples" / "configs" / config).read_text())
    result = results(config, config_group(config))  # the first config of its simulator runs them all
    if simulator(data["env"]["id"]) == "behavior":
        # as written: it must stop before any model is loaded, naming what is missing
        assert_clear_error(result, "cannot run on this machine", "Isaac Sim", "OmniGibson")
        return
    assert_ok(result)
    saved = checkpoints(results.runs / config, data["name"])
    assert [p.name for p in saved] == ["ckpt_00000001.pt"], f"expected one update's checkpoint, got {saved}"
    assert f"checkpoint:  {saved[-1]}" in result.stdout


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_example_script_short_form(script, results):
    assert_ok(results(f"script:{script}", SCRIPT_GROUP[script]))


@pytest.mark.parametrize("script", sorted(BENCHMARKS))
def test_benchmark_short_form(script, results):
    result = results(f"script:{script}", SCRIPT_GROUP[script])
    assert_ok(result)
    assert result.stdout.strip(), f"{script} printed no result"


@pytest.mark.parametrize("script", sorted(GPU_ONLY))
def test_gpu_benchmark_fails_fast_without_cuda(script, results):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the GPU benchmark would run")
    _, words = GPU_ONLY[script]
    result = results(f"gpu:{script}", "maniskill")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    for word in words:
        assert word in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_vla_gpu_benchmark_tiny_on_cpu(tmp_path, algo):
    """The GPU benchmark's whole loop with a tiny model (30-45 s; the CI form above checks the CUDA guard)."""
    result = run_command([*executable("python"), "benchmarks/bench_vla_gpu.py", "--size", "tiny", "--env", "synthetic",
                          "--family", "smolvlm", "--policy", "continuous", "--num-envs", "4" if algo == "grpo" else "1",
                          "--n-steps", "2", "--episode-steps", "3", "--algo", algo, "--batch-size", "4",
                          "--updates", "1", "--chunk", "2", "--dtype", "float32",
                          "--model-dir", str(tmp_path / "model"), "--json", str(tmp_path / "r.json")], timeout=300)
    assert_ok(result)
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert report["algo"] == algo and report["loop_samples_per_s"] > 0
    assert json.loads((tmp_path / "r.json").read_text()) == report and report["commit"] != "unknown"
    if algo == "grpo":  # 2 groups of 4 episodes of 3 decisions per update
        assert report["samples_per_rollout"] == 24
