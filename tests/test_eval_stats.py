"""The statistics of the evaluation reports: Wilson intervals in eval.md / eval.json, the exact McNemar test, the
paired bootstrap, and ``vla-gym compare`` on two reports (plain eval.json and OOD reports), all without a simulator.
"""
from __future__ import annotations

import json
import math

import pytest

from vla_gym.cli import main as cli_main
from vla_gym.trainers.evaluation.ood import parse_rows, run_ood
from vla_gym.trainers.evaluation.periodic import eval_message, interval_scalars
from vla_gym.trainers.evaluation.report import markdown_table, summarize, write_report
from vla_gym.trainers.evaluation.stats import (
    discordant_pairs,
    mcnemar_exact_p,
    mean_rate_interval,
    paired_bootstrap_interval,
    rate_with_interval,
    success_counts,
    wilson_interval,
)
from vla_gym.trainers.rollout.episode_plan import EpisodeResult, EpisodeSpec
from vla_gym.trainers.runtime.config import config_from_dict


def test_wilson_interval_known_values():
    # (k + z²/2) / (n + z²) ± ...: 0/10 -> [0, z²/(n + z²)], 5/10 symmetric around 0.5, 10/10 mirrors 0/10
    assert wilson_interval(0, 10) == (0.0, pytest.approx(0.277533, abs=1e-6))
    assert wilson_interval(5, 10) == (pytest.approx(0.236593, abs=1e-6), pytest.approx(0.763407, abs=1e-6))
    assert wilson_interval(10, 10) == (pytest.approx(0.722467, abs=1e-6), 1.0)
    assert wilson_interval(1, 1) == (pytest.approx(0.206549, abs=1e-6), 1.0)
    low90, high90 = wilson_interval(5, 10, confidence=0.9)
    assert 0.236593 < low90 < 0.5 < high90 < 0.763407  # a lower level gives a narrower interval
    for bad in [(1, 0), (11, 10), (-1, 10)]:
        with pytest.raises(ValueError):
            wilson_interval(*bad)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, confidence=1.0)


def test_rate_with_interval_is_the_tables_cell():
    """``35.0 % [18.1, 56.7]``: the rate and its Wilson interval in percent, as experiments/libero_miniature/table.py shows them."""
    assert rate_with_interval(7, 20) == "35.0 % [18.1, 56.7]"
    assert rate_with_interval(0, 10) == "0.0 % [0.0, 27.8]" and rate_with_interval(10, 10) == "100.0 % [72.2, 100.0]"
    assert rate_with_interval(0, 0) == "n/a"  # no episodes: no rate
    with pytest.raises(ValueError):
        rate_with_interval(11, 10)


def test_mcnemar_exact_known_tables():
    assert mcnemar_exact_p(1, 9) == 2 * 11 / 1024 == mcnemar_exact_p(9, 1)
    assert mcnemar_exact_p(10, 2) == pytest.approx(2 * (1 + 12 + 66) / 4096)  # 0.0386
    assert mcnemar_exact_p(0, 5) == 0.0625 and mcnemar_exact_p(0, 6) == 0.03125
    assert mcnemar_exact_p(0, 0) == 1.0 and mcnemar_exact_p(4, 4) == 1.0 and mcnemar_exact_p(4, 5) == 1.0
    assert 0 < mcnemar_exact_p(400, 600) < 1e-9  # large tables stay exact (integers), no underflow to nan
    assert discordant_pairs([1, 1, 0, 0, 1], [1, 0, 1, 1, 1]) == (1, 2)
    with pytest.raises(ValueError):
        discordant_pairs([1], [1, 0])


def test_paired_bootstrap_interval():
    a = [0] * 10 + [1] * 10
    b = [1] * 8 + [0] * 2 + [1] * 10  # +0.3 on the paired episodes
    low, high = paired_bootstrap_interval(a, b)
    assert low < 0.3 < high and (low, high) == paired_bootstrap_interval(a, b)  # seeded: repeatable
    assert paired_bootstrap_interval(a, a) == (0.0, 0.0) and paired_bootstrap_interval([0, 0], [1, 1]) == (1.0, 1.0)
    # within strata the pairs of a stratum keep their number: a stratum where B always wins adds a fixed +0.5
    strata = ["x"] * 10 + ["y"] * 10
    low_s, high_s = paired_bootstrap_interval([0] * 10 + [0] * 10, [1] * 10 + [0] * 5 + [1] * 5, strata=strata)
    assert 0.5 <= low_s < 0.75 < high_s <= 1.0
    with pytest.raises(ValueError):
        paired_bootstrap_interval([1, 0], [1])


def test_mean_rate_interval_pools_equal_rows_and_skips_missing_rates():
    assert mean_rate_interval([(0.5, 10), (0.2, 10)]) == pytest.approx(wilson_interval(7, 20))
    assert mean_rate_interval([(0.5, 10), (math.nan, 10)]) == pytest.approx(wilson_interval(5, 10))
    assert mean_rate_interval([(math.nan, 10)]) is None and mean_rate_interval([]) is None
    assert success_counts({"episodes": 8, "success_rate": 0.25}) == (2, 8)
    assert success_counts({"episodes": 8, "success_rate": 0.25, "successes": 1, "success_episodes": 4}) == (1, 4)


def episodes(successes: list[bool], task_names=("open the drawer", "pick the bowl"), seed0: int = 0,
             init_states=None) -> list[EpisodeResult]:
    """Played episodes: task ``k // per_task``, init state ``k % per_task``, seed ``seed0 + k``."""
    per_task = len(successes) // len(task_names)
    results = []
    for k, success in enumerate(successes):
        task, state = divmod(k, per_task)
        state = state if init_states is None else init_states[state]
        results.append(EpisodeResult(episode_return=float(success), length=10, success=success, task_id=task,
                                     task_name=task_names[task], index=k,
                                     spec=EpisodeSpec(seed=seed0 + k, task_id=task, init_state_id=state)))
    return results


def test_eval_report_shows_counts_and_wilson_intervals(tmp_path):
    results = episodes([True] * 5 + [False] * 5 + [False] * 10)
    summary = write_report(results, tmp_path, header="# t")
    table = (tmp_path / "eval.md").read_text()
    assert "| task | episodes | success rate | 95 % CI | mean return | mean length |" in table
    assert "| open the drawer | 10 | 0.500 | [0.237, 0.763] |" in table
    assert "| pick the bowl | 10 | 0.000 | [0.000, 0.278] |" in table
    assert "| **all** | 20 | 0.250 | [0.112, 0.469] |" in table
    saved = json.loads((tmp_path / "eval.json").read_text())
    overall = saved["summary"]["overall"]
    # the keys readers had stay; the counts and the interval are new keys
    assert overall["episodes"] == 20 and overall["success_rate"] == 0.25 and overall["mean_length"] == 10
    assert overall["successes"] == 5 and overall["success_episodes"] == 20
    assert overall["ci95"] == pytest.approx(list(wilson_interval(5, 20)))
    assert saved["summary"]["tasks"]["pick the bowl"]["ci95"][0] == 0.0 and summary == saved["summary"]
    # an env that reports no success: no interval; a summary written before intervals existed: from its counts
    no_success = summarize([EpisodeResult(episode_return=1.0, length=3)])
    assert no_success["overall"]["ci95"] is None and "| **all** | 1 | n/a | n/a |" in markdown_table(no_success)
    old = {"tasks": {}, "overall": {"episodes": 10, "success_rate": 0.5, "mean_return": 0.0, "mean_length": 1.0}}
    assert "| **all** | 10 | 0.500 | [0.237, 0.763] |" in markdown_table(old)


def test_training_evaluations_print_and_log_counts_and_intervals():
    summary = summarize(episodes([True] * 5 + [False] * 5 + [False] * 10))
    message = eval_message(summary, 1000).splitlines()
    assert message == ["eval @ 1000 steps: success 0.250 (5/20, 95 % CI [0.112, 0.469]), return 0.25 over 20 episodes",
                       "  open the drawer: success 0.500 (5/10, 95 % CI [0.237, 0.763])",
                       "  pick the bowl: success 0.000 (0/10, 95 % CI [0.000, 0.278])"]
    scalars = interval_scalars(summary)
    assert scalars["eval/success_ci95_low"] == pytest.approx(wilson_interval(5, 20)[0])
    assert scalars["eval/success_rate/open the drawer"] == 0.5 and scalars["eval/success_ci95_high/pick the bowl"] > 0
    no_success = summarize([EpisodeResult(episode_return=2.0, length=3)])
    assert eval_message(no_success, 5) == "eval @ 5 steps: return 2.00 over 1 episodes"
    assert interval_scalars(no_success) == {}


def compare(capsys, *args) -> tuple[int, str, str]:
    code = cli_main(["compare", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_vla_gym_compare_pairs_the_episodes_both_reports_played(tmp_path, capsys):
    # A: 2 tasks x 10 init states; B: the same but init state 9 of each task replaced by init state 10
    a = [True] * 3 + [False] * 7 + [True] * 5 + [False] * 5
    b = [True] * 9 + [False] * 1 + [True] * 5 + [False] * 5
    write_report(episodes(a), tmp_path / "a")
    b_results = episodes(b)
    b_results = [r if r.spec.init_state_id != 9 else
                 EpisodeResult(**{**r.__dict__, "spec": EpisodeSpec(seed=r.spec.seed, task_id=r.task_id, init_state_id=10)})
                 for r in b_results]
    write_report(b_results, tmp_path / "b")
    code, out, err = compare(capsys, tmp_path / "a" / "eval.json", tmp_path / "b", "--json", tmp_path / "cmp.json")
    assert code == 0, err
    assert "Paired 18 episodes on (task, init state, seed) of A's 20 and B's 20; unpaired: 2 only in A, 2 only in B" in out
    # task 0: A solved states 0-2, B 0-8 (and 9, unpaired): 6 discordant pairs, all for B: p = 2 / 2**6
    assert "| open the drawer | 9 | 0.333 | 1.000 | +0.667 [" in out and "| 0 | 6 | 0.0312 |" in out
    assert "| pick the bowl | 9 | 0.556 | 0.556 | +0.000 [+0.000, +0.000] | 0 | 0 | 1 |" in out
    assert "| **all** | 18 |" in out
    saved = json.loads((tmp_path / "cmp.json").read_text())
    overall = saved["overall"]
    assert overall["paired"] == 18 and overall["a_only"] == 0 and overall["b_only"] == 6
    assert overall["mcnemar_p"] == pytest.approx(2 / 64) and overall["difference"] == pytest.approx(6 / 18)
    low, high = overall["difference_ci95"]
    assert 0 < low < 6 / 18 < high <= 12 / 18  # drawn within tasks: task 1 adds nothing
    assert saved["unpaired"] == {"only_a": 2, "only_b": 2, "task_mismatch": 0, "no_success": 0}
    assert set(saved["tasks"]) == {"open the drawer", "pick the bowl"}


def test_vla_gym_compare_pools_the_pairs_of_another_seed(tmp_path, capsys):
    """--pool A2 B2: a second training seed's episodes join the test. Each seed alone gains 5 of 20 episodes and
    loses none (McNemar p = 2 / 2**5 = 0.0625, not significant); pooled, 10 of 40 (p = 2 / 2**10)."""
    a = [True] * 5 + [False] * 15
    b = [True] * 10 + [False] * 10
    for seed in ("s0", "s1"):
        write_report(episodes(a), tmp_path / seed / "sft")
        write_report(episodes(b), tmp_path / seed / "rl")
    code, out, err = compare(capsys, tmp_path / "s0" / "sft", tmp_path / "s0" / "rl", "--json", tmp_path / "one.json")
    assert code == 0, err
    assert json.loads((tmp_path / "one.json").read_text())["overall"]["mcnemar_p"] == pytest.approx(2 / 2 ** 5)
    code, out, err = compare(capsys, tmp_path / "s0" / "sft", tmp_path / "s0" / "rl", "--pool", tmp_path / "s1" / "sft",
                             tmp_path / "s1" / "rl", "--json", tmp_path / "pooled.json")
    assert code == 0, err
    assert f"pooled with A2: {tmp_path / 's1' / 'sft' / 'eval.json'}" in out and "Paired 40 episodes" in out
    pooled = json.loads((tmp_path / "pooled.json").read_text())
    overall = pooled["overall"]
    assert (overall["paired"], overall["a_only"], overall["b_only"]) == (40, 0, 10)
    assert overall["mcnemar_p"] == pytest.approx(2 / 2 ** 10) and pooled["report_pairs"] == 2
    assert overall["difference_ci95"][0] > 0 and pooled["episodes_a"] == 40
    assert all(task["paired"] == 20 for task in pooled["tasks"].values())  # each task: 10 episodes per seed
    code, _, err = compare(capsys, tmp_path / "s0" / "sft", tmp_path / "s0" / "rl", "--pool", tmp_path / "s1" / "sft",
                           tmp_path / "missing")
    assert code == 2 and "not found" in err


def test_vla_gym_compare_refuses_reports_without_common_episodes(tmp_path, capsys):
    write_report(episodes([True, False, True, False]), tmp_path / "a")
    write_report(episodes([True, False, True, False], seed0=100, init_states=[40, 41]), tmp_path / "b")
    code, out, err = compare(capsys, tmp_path / "a", tmp_path / "b" / "eval.json")
    assert code == 2 and not out
    assert "no episode in common" in err and "no (task, init state, seed) in common" in err
    assert "init states 0-1, seeds 0-3" in err and "init states 40-41, seeds 100-103" in err
    write_report(episodes([True, False, True, False], task_names=("x", "y")), tmp_path / "other_suite")
    code, _, err = compare(capsys, tmp_path / "a", tmp_path / "other_suite")
    assert code == 2 and "different tasks" in err and "different suites" in err
    code, _, err = compare(capsys, tmp_path / "a", tmp_path / "missing")
    assert code == 2 and "not found" in err


def test_vla_gym_compare_ood_reports_row_by_row(tmp_path, capsys):
    """Two OOD reports: each row both have is compared on its own eval.json; a row only one has is named."""
    def report(directory, successes):
        def evaluate(env_cfg, row_directory, header):
            return write_report(episodes(successes[row_directory.name]), row_directory, header)
        run_ood(evaluate, config_from_dict({}).env, parse_rows(",".join(k for k in successes if k != "ind")),
                directory, "t", sees_images=True)
        return directory

    sft = report(tmp_path / "sft", {"ind": [True, False] * 4, "lighting": [False] * 8, "paraphrase": [True] * 8})
    grpo = report(tmp_path / "grpo", {"ind": [True] * 8, "lighting": [True] * 8})
    ood = (sft / "ood.md").read_text()
    assert "| 50.0 [21.5, 78.5] n=8 |" in ood and "| lighting | vision | 0.5 | 8 | 0.0 | [0.0, 32.4] | -50.0 |" in ood
    code, out, err = compare(capsys, sft / "ood.json", grpo, "--json", tmp_path / "ood_cmp.json")
    assert code == 0, err
    assert "| ind | ind | 8 | 0.500 | 1.000 | +0.500 [" in out and "| lighting | vision | 8 | 0.000 | 1.000 |" in out
    assert "Rows not compared: paraphrase (only in A)." in out
    saved = json.loads((tmp_path / "ood_cmp.json").read_text())
    assert saved["rows"]["lighting"]["overall"]["mcnemar_p"] == pytest.approx(2 / 256)
    code, _, err = compare(capsys, sft / "ood.json", sft / "ind" / "eval.json")
    assert code == 2 and "compare two eval.json or two ood.json" in err
