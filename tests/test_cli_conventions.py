"""One convention for every command line: the same flags and list syntax for the same things, examples in --help."""
from __future__ import annotations

import argparse
import pathlib
import re

import pytest

from vla_gym.runtime.cli_args import parse_ids

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: every file that parses a command line
COMMAND_LINES = sorted(
    [*ROOT.glob("scripts/*.py"), *ROOT.glob("benchmarks/bench_*.py"), *ROOT.glob("examples/*.py"),
     *ROOT.glob("experiments/*/*.py"),
     ROOT / "trainers/eval.py", ROOT / "trainers/runtime/launch.py", ROOT / "vla_gym/cli.py",
     ROOT / "vla_gym/data/record.py"])
#: flags that name the same things everywhere: a file may not spell them another way
OLD_SPELLINGS = ("--task-ids", "--processes", "--output", "--outdir", "--out-dir", "--num-workers")


@pytest.mark.quick
def test_ids_lists_read_the_same_everywhere():
    assert parse_ids(["0", "1", "2"]) == parse_ids(["0,1,2"]) == parse_ids(["0-2"]) == [0, 1, 2]
    assert parse_ids(["40-42", "7"]) == [7, 40, 41, 42] and parse_ids(None) is None
    for bad in (["x"], ["3-1"], ["-1"], ["env.id=VLA/LiberoObject-v0"]):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_ids(bad)


@pytest.mark.quick
@pytest.mark.parametrize("path", COMMAND_LINES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_line_shows_examples_and_uses_the_shared_flags(path):
    text = path.read_text()
    if "add_argument" not in text:
        pytest.skip("no command line of its own")
    if path.name == "gen_behavior_tasks.py":  # runs in a bddl 3.x venv without vla_gym: its own examples
        assert 'epilog="examples:' in text
        return
    assert "argparse.ArgumentParser(" not in text, \
        f"{path.name}: build the parser with vla_gym.runtime.cli_args.script_parser / parser_with_examples"
    for flag in OLD_SPELLINGS:
        assert not re.search(rf"add_argument\(\s*\"{flag}\"", text), f"{path.name}: {flag} has a shared name"


@pytest.mark.quick
@pytest.mark.parametrize("argv", [["--help"], ["list", "--help"], ["demos", "--help"], ["compare", "--help"]])
def test_vla_gym_help_ends_with_examples(argv, capsys):
    from vla_gym.cli import main

    with pytest.raises(SystemExit):
        main(argv)
    assert "examples:\n  vla-gym " in capsys.readouterr().out


@pytest.mark.quick
def test_trainer_and_eval_help_end_with_examples(capsys):
    from vla_gym.trainers.eval import parse_args
    from vla_gym.trainers.runtime.launch import parse_args as trainer_args

    for parse in (lambda: parse_args(["--help"]), lambda: trainer_args(["--help"], "Train", "trainers/grpo.py")):
        with pytest.raises(SystemExit):
            parse()
        out = capsys.readouterr().out
        assert "examples:\n  " in out and ("--init-states 40-49" in out or "trainers/grpo.py --config" in out)
