"""One convention for every command line (``vla-gym``, ``trainers/*.py``, ``scripts/``, ``benchmarks/``).

The same things have the same flags and the same list syntax everywhere:

===================  =====================================================================================
``--tasks IDS``      task ids of the env id; default all
``--init-states IDS`` initial states of each task (LIBERO's fixed ones); default all / as the command says
``--episodes-per-task N``  episodes per task
``--seed N``         the first seed (simulator seeds of the episodes, or the training seed)
``--seeds IDS``      several seeds (scripts that repeat a run)
``--out DIR``        the output directory (report, dataset, figures); rerun with the same ``--out`` to resume
``--workers N``      processes, each with its own env
``--num-envs N``     envs per process
===================  =====================================================================================

``IDS`` is a list of non-negative integers written as numbers, comma lists and inclusive ranges, in one
argument or several: ``--tasks 0 1 2``, ``--tasks 0,1,2``, ``--init-states 40-49``, ``--tasks 0-3,7 9``::

    >>> parse_ids(["0-3,7", "9"])
    [0, 1, 2, 3, 7, 9]
    >>> parse_ids(["40-42"])
    [40, 41, 42]

Every parser shows examples at the end of ``--help`` (:func:`parser_with_examples`).
"""
from __future__ import annotations

import argparse
import pathlib
from collections.abc import Sequence


def parse_ids(tokens: str | Sequence[str] | None) -> list[int] | None:
    """``["0-3,7", "9"]`` -> ``[0, 1, 2, 3, 7, 9]`` (sorted, no repeats); None stays None."""
    if tokens is None:
        return None
    if isinstance(tokens, str):
        tokens = [tokens]
    ids: set[int] = set()
    for token in tokens:
        for part in str(token).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" in part:
                raise argparse.ArgumentTypeError(
                    f"{part!r} is not an id: a key=value override after a list of ids is read as one of them; "
                    "write the ids as one argument (0,3 or 0-4) or put the overrides before the flags")
            first, dash, last = part.partition("-")
            try:
                low, high = int(first), int(last) if dash else int(first)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{token!r} is not a list of ids: write numbers, comma lists or ranges, e.g. 0 1 2, 0,1,2 or 0-4"
                ) from None
            if low < 0 or high < low:
                raise argparse.ArgumentTypeError(f"{part!r}: ids are >= 0 and a range goes up, e.g. 40-49")
            ids.update(range(low, high + 1))
    return sorted(ids)


class _IdsAction(argparse.Action):
    """Stores ``parse_ids`` of the tokens; an error names the flag and the syntax."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            setattr(namespace, self.dest, parse_ids(values))
        except argparse.ArgumentTypeError as error:
            parser.error(f"{option_string}: {error}")


def add_ids(parser: argparse.ArgumentParser, flag: str, help: str, default=None) -> None:
    """A flag that takes ``IDS`` (see the module docstring), parsed to a sorted list of ints."""
    parser.add_argument(flag, nargs="+", action=_IdsAction, default=default, metavar="IDS",
                        help=f"{help} (e.g. 0 1 2, 0,1,2 or 0-4)")


def add_tasks(parser: argparse.ArgumentParser, help: str = "only these task ids of the env id (default: all)") -> None:
    add_ids(parser, "--tasks", help)


def add_init_states(parser: argparse.ArgumentParser, help: str = "initial states of each task") -> None:
    add_ids(parser, "--init-states", help)


def add_legacy_first_init_state(parser: argparse.ArgumentParser) -> None:
    """The older ``--first-init-state K`` (states K.. with ``--episodes-per-task``), still accepted and not listed
    in ``--help``: commands in old notes keep working, new ones write ``--init-states``."""
    parser.add_argument("--first-init-state", type=int, default=None, help=argparse.SUPPRESS)


def init_state_range(init_states: list[int] | None, first_init_state: int | None,
                     episodes_per_task: int | None) -> tuple[int | None, int]:
    """``--init-states`` (one contiguous range), the older ``--first-init-state`` and ``--episodes-per-task`` as
    ``(episodes per task or None, first state)``.

    >>> init_state_range([40, 41, 42], None, None), init_state_range(None, 40, 10), init_state_range(None, None, 5)
    ((3, 40), (10, 40), (5, 0))
    """
    if init_states is None:
        return episodes_per_task, first_init_state or 0
    if first_init_state is not None:
        raise argparse.ArgumentTypeError("--init-states and --first-init-state: give only --init-states")
    if init_states != list(range(init_states[0], init_states[-1] + 1)):
        raise argparse.ArgumentTypeError(f"--init-states {init_states}: give one contiguous range, e.g. 40-49")
    if episodes_per_task is not None and episodes_per_task != len(init_states):
        raise argparse.ArgumentTypeError(f"--init-states gives {len(init_states)} episodes per task, "
                                         f"--episodes-per-task {episodes_per_task}: give only one of them")
    return len(init_states), init_states[0]


def parser_with_examples(prog: str | None, description: str, examples: Sequence[str],
                         parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """An ArgumentParser whose ``--help`` ends with ``examples`` (one command each), as every vla_gym CLI has.

    >>> parser = parser_with_examples("demo", "Do a thing.", ["demo --tasks 0-2 --out runs/x"])
    >>> "demo --tasks 0-2 --out runs/x" in parser.format_help()
    True
    """
    epilog = "examples:\n" + "\n".join(f"  {example}" for example in examples)
    if parser is None:
        return argparse.ArgumentParser(prog=prog, description=description, epilog=epilog,
                                       formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.description, parser.epilog = description, epilog
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def script_parser(doc: str, **kwargs) -> argparse.ArgumentParser:
    """The parser of a script whose module docstring starts with what it does and shows commands: ``--help``
    gives the first paragraph and, as examples, the docstring's command lines (``python ...``, ``torchrun ...``).

    >>> parser = script_parser('''Time a thing.
    ...
    ...     python benchmarks/thing.py --quick      # short form
    ... ''')
    >>> parser.format_help().rstrip().splitlines()[-2:]
    ['examples:', '  python benchmarks/thing.py --quick      # short form']
    """
    lines = [line.strip() for line in doc.splitlines()]
    examples = [line for line in lines if line.startswith(("python ", "torchrun ", "vla-gym ", "nice "))]
    return parser_with_examples(kwargs.pop("prog", None), doc.strip().split("\n\n")[0], examples, **kwargs)


__all__ = ["add_ids", "add_init_states", "add_legacy_first_init_state", "add_tasks", "init_state_range",
           "parse_ids", "parser_with_examples", "script_parser"]


def first_missing_folder(path: pathlib.Path) -> pathlib.Path | None:
    """The topmost folder of ``path`` that does not exist yet (None: ``path`` exists): what a command that fails
    before writing anything removes again, so that bad input leaves no partial output."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing
