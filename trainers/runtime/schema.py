"""Config schema machinery shared by every section: typed dataclass fields checked key by key, ``key.sub=value``
overrides parsed as YAML, and the errors that name the key and the fix.

    >>> @dataclass
    ... class Section:
    ...     steps: int = 1
    >>> build(Section, {"steps": 3}).steps
    3
    >>> build(Section, {"step": 3})
    Traceback (most recent call last):
    ...
    vla_gym.trainers.runtime.schema.ConfigError: unknown config key 'step'; did you mean steps?
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass  # noqa: F401  (the doctest's)
from typing import Any, Literal, Union

import yaml


class ConfigError(ValueError):
    """A config key or value is invalid; the message names the key."""


def at_least_one(section: str, values: dict[str, int | None]) -> None:
    """Counts that must be 1 or more (None: unset, allowed)."""
    for key, value in values.items():
        if value is not None and value < 1:
            raise ConfigError(f"{section}.{key}={value}: must be at least 1")


def _check_value(key: str, value: Any, hint: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _check_value(key, value, inner[0])
    if dataclasses.is_dataclass(hint):
        return build(hint, value, key)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if hint is Any:
        return value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_check_value(f"{key}[{i}]", v, args[0]) for i, v in enumerate(value)] if args else list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if hint in (bool, str):
        if not isinstance(value, hint):
            raise ConfigError(f"{key}: expected {'true or false' if hint is bool else 'a string'}, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, str):  # YAML 1.1 reads 3e-4 as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    raise TypeError(f"config field {key} has an unsupported type {hint!r}")


def build(cls: type, data: Any, prefix: str = "") -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; valid keys: {', '.join(names)}"
            raise ConfigError(f"unknown config key {full!r}{hint}")
        values[key] = _check_value(full, value, hints[key])
    return cls(**values)


def _set(tree: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = tree.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted!r}: {part!r} is not a mapping")
        tree = node
    tree[parts[-1]] = value



def apply_overrides(data: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """A deep copy of ``data`` with each ``key.sub=value`` override set (the value parsed as YAML)."""
    data = _deep_copy(data or {})
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like key.sub=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: the value is not valid YAML ({yaml_problem(exc)}); quote it, "
                              f"e.g. {key}='{raw}'") from None
        _set(data, key.strip(), value)
    return data


def known_keys(cls: type, data: Any) -> Any:
    """``data`` without the keys ``cls`` (a config dataclass, checked section by section) does not have."""
    if not isinstance(data, dict):
        return data
    hints = typing.get_type_hints(cls)
    return {key: known_keys(hints[key], value) if dataclasses.is_dataclass(hints[key]) else value
            for key, value in data.items() if key in hints}


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: what and where (line, column)."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {key: _deep_copy(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_deep_copy(value) for value in data]
    return data
