"""Wrapper specs: the one way configs, :func:`vla_gym.make_vec` and the trainers name wrappers.

    >>> from vla_gym.vector.wrapper_spec import parse_wrappers
    >>> chunk, metrics = parse_wrappers([{"name": "ActionChunk", "kwargs": {"chunk_size": 8}}, "EpisodeMetrics"])
    >>> chunk.func.__name__, chunk.keywords, metrics.__name__
    ('ActionChunk', {'chunk_size': 8}, 'EpisodeMetrics')

One entry of a wrapper list is one of (innermost wrapper first in the list):

- ``"EpisodeMetrics"``: the name of a wrapper class in :mod:`vla_gym.wrappers`;
- ``"package.module:Class"``: any importable callable ``env -> env``;
- ``{"name": <one of the two names above>, "kwargs": {...}}``: the same with keyword arguments
  (YAML: ``{name: ActionChunk, kwargs: {chunk_size: 8}}``); ``kwargs`` may be left out;
- from Python only: a callable ``env -> env`` (a class, a function, a ``functools.partial``).

:func:`parse_wrappers` turns a list into callables (a class, or a ``functools.partial`` of it with the
kwargs); :func:`check_wrapper_specs` does the same checks without keeping the result, which is what
``trainers/runtime/config.py`` runs when a config is loaded, so a bad entry fails before any env is built.
A bad entry raises :class:`WrapperSpecError`, which names the entry's key (``env.wrappers[0]``), what was
wrong, and the accepted forms; unknown names list the available wrappers and the closest matches;
unknown keyword arguments list the ones the wrapper takes.
"""
from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import gymnasium as gym

import vla_gym.wrappers as wrappers

ACCEPTED_FORMS = (
    "accepted forms: a wrapper name from vla_gym.wrappers (e.g. EpisodeMetrics), 'package.module:Class', "
    "{name: ActionChunk, kwargs: {chunk_size: 8}}, or (from Python) a callable env -> env"
)
#: keyword arguments that make_vec passes itself, so a spec must not set them
_PASSED_BY_MAKE_VEC = ("env", "env_index")


class WrapperSpecError(ValueError):
    """A wrapper spec is malformed; the message names its key and the accepted forms."""


def available_wrappers() -> list[str]:
    """Names of the gymnasium wrapper classes in :mod:`vla_gym.wrappers`."""
    return sorted(name for name in wrappers.__all__
                  if isinstance(getattr(wrappers, name), type) and issubclass(getattr(wrappers, name), gym.Wrapper))


def parse_wrappers(specs: Iterable[Any], key: str = "wrappers") -> tuple[Callable, ...]:
    """Callables ``env -> env`` for a list of specs; ``key`` names the list in error messages."""
    if isinstance(specs, (str, Mapping)) or callable(specs) or not isinstance(specs, Iterable):
        raise WrapperSpecError(f"{key}: expected a list of wrapper specs, got {specs!r}; {ACCEPTED_FORMS}")
    return tuple(parse_wrapper(spec, f"{key}[{index}]") for index, spec in enumerate(specs))


def check_wrapper_specs(specs: Iterable[Any], key: str = "wrappers") -> None:
    """Raise :class:`WrapperSpecError` if any spec is malformed (names, keys, keyword arguments)."""
    parse_wrappers(specs, key)


def parse_wrapper(spec: Any, key: str = "wrapper") -> Callable:
    """One spec -> a callable ``env -> env`` (the class itself, or a ``functools.partial`` with its kwargs)."""
    if isinstance(spec, str):
        wrapper = _resolve_name(spec, key)
        _check_kwargs(wrapper, spec, {}, key)
        return wrapper
    if isinstance(spec, Mapping):
        return _parse_mapping(spec, key)
    if callable(spec):
        return spec
    raise WrapperSpecError(f"{key}: {spec!r} is not a wrapper spec; {ACCEPTED_FORMS}")


def _parse_mapping(spec: Mapping, key: str) -> Callable:
    unknown = sorted(str(name) for name in spec if name not in ("name", "kwargs"))
    if unknown:
        arguments = {name: spec[name] for name in spec if name not in ("name", "kwargs")}
        example = f"{{name: {spec.get('name', 'ActionChunk')}, kwargs: {_yaml_inline(arguments)}}}"
        raise WrapperSpecError(
            f"{key}: unknown key(s) {', '.join(unknown)} in a wrapper mapping (it takes only 'name' and 'kwargs'); "
            f"if they are the wrapper's arguments, put them under kwargs: {example}; {ACCEPTED_FORMS}"
        )
    if "name" not in spec:
        raise WrapperSpecError(f"{key}: a wrapper mapping needs 'name', got {dict(spec)!r}; {ACCEPTED_FORMS}")
    name, kwargs = spec["name"], spec.get("kwargs") or {}
    if not isinstance(name, str):
        raise WrapperSpecError(f"{key}.name: expected a wrapper name (a string), got {name!r}; {ACCEPTED_FORMS}")
    if not isinstance(kwargs, Mapping) or not all(isinstance(arg, str) for arg in kwargs):
        raise WrapperSpecError(f"{key}.kwargs: expected a mapping of keyword arguments, got {kwargs!r}")
    wrapper = _resolve_name(name, key)
    _check_kwargs(wrapper, name, dict(kwargs), key)
    return functools.partial(wrapper, **kwargs) if kwargs else wrapper


def _resolve_name(name: str, key: str) -> Callable:
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise WrapperSpecError(f"{key}: cannot import module {module_name!r} of {name!r} ({exc})") from None
        if not callable(getattr(module, attr, None)):
            raise WrapperSpecError(f"{key}: module {module_name!r} has no callable {attr!r}; {ACCEPTED_FORMS}")
        return getattr(module, attr)
    names = available_wrappers()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise WrapperSpecError(
            f"{key}: unknown wrapper {name!r}{hint}; vla_gym.wrappers has {', '.join(names)}, "
            f"or give 'package.module:Class'"
        )
    return getattr(wrappers, name)


def _check_kwargs(wrapper: Callable, name: str, kwargs: dict, key: str) -> None:
    """Refuse keyword arguments the wrapper does not take (or that make_vec passes itself) and missing ones."""
    reserved = [arg for arg in kwargs if arg in _PASSED_BY_MAKE_VEC]
    if reserved:
        raise WrapperSpecError(f"{key}.kwargs: {', '.join(reserved)} is passed by the vector env, not the config")
    try:
        parameters = list(inspect.signature(wrapper).parameters.values())[1:]  # the first one is the env
    except (TypeError, ValueError):  # no signature to check against
        return
    named = [p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
             and p.name not in _PASSED_BY_MAKE_VEC]
    takes = [p.name for p in named]
    unknown = [arg for arg in kwargs if arg not in takes]
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in parameters):
        close = {arg: difflib.get_close_matches(arg, takes, n=1) for arg in unknown}
        hints = "".join(f" ({arg!r}: did you mean {match[0]!r}?)" for arg, match in close.items() if match)
        raise WrapperSpecError(f"{key}.kwargs: {name} takes no argument {', '.join(map(repr, unknown))}{hints}; "
                               f"it takes {', '.join(takes) or 'none'}")
    missing = [p.name for p in named if p.default is p.empty and p.name not in kwargs]
    if missing:
        values = ", ".join(f"{arg}: ..." for arg in missing)
        raise WrapperSpecError(f"{key}: {name} needs {', '.join(missing)}: write {{name: {name}, kwargs: {{{values}}}}}")


def _yaml_inline(mapping: Mapping) -> str:
    return "{" + ", ".join(f"{name}: {value}" for name, value in mapping.items()) + "}"
