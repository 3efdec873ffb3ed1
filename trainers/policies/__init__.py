"""Policy registry: ``make_policy(name, observation_space, action_space, **cfg)``.

    >>> from vla_gym.trainers.policies import make_policy
    >>> policy = make_policy("mlp", env.observation_space, env.action_space, hidden_sizes=[64, 64])  # doctest: +SKIP
    >>> actions, log_probs, values = policy.act(obs_batch)                                          # doctest: +SKIP

Built-in names: ``mlp`` (state), ``cnn`` (images + state + instruction), and the VLA families
``vla_tokens``, ``vla_oft``, ``pi0``, ``vla_small`` (docs/vla.md). Other policies join with
:func:`register_policy` (a class, or a lazy ``"module:Class"`` string so nothing heavy is imported
until used), or are named directly as ``"package.module:Class"`` in a config. Unknown ``cfg`` keys
are rejected with the accepted ones listed. See :mod:`.base` for the interface a policy implements.
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any

from vla_gym.trainers.policies.base import Policy

_REGISTRY: dict[str, Any] = {
    "mlp": "vla_gym.trainers.policies.mlp:MLPPolicy",
    "cnn": "vla_gym.trainers.policies.cnn:CNNPolicy",
    "vla_tokens": "vla_gym.trainers.policies.vla_tokens:ActionTokenVLAPolicy",
    "vla_oft": "vla_gym.trainers.policies.vla_continuous:ContinuousVLAPolicy",
    "pi0": "vla_gym.trainers.policies.vla_pi0:PI0Policy",
    "vla_small": "vla_gym.trainers.policies.vla_small:SmallVLAPolicy",
}


def register_policy(name: str, cls: type[Policy] | str) -> None:
    """Make ``name`` resolve to ``cls`` (a Policy subclass or a ``"module:Class"`` string)."""
    _REGISTRY[name] = cls


def available_policies() -> list[str]:
    return sorted(_REGISTRY)


def policy_class(name: str) -> type[Policy]:
    """The class behind a registered name or a ``"module:Class"`` path."""
    target = _REGISTRY.get(name, name)
    if isinstance(target, str):
        if ":" not in target:
            raise KeyError(
                f"unknown policy {name!r}; registered: {', '.join(available_policies())} "
                "(or give a class path 'package.module:ClassName')"
            )
        module, _, attr = target.partition(":")
        target = getattr(importlib.import_module(module), attr)
    if not (isinstance(target, type) and issubclass(target, Policy)):
        raise TypeError(f"policy {name!r} resolves to {target!r}, which is not a vla_gym.trainers.policies.Policy")
    return target


def check_policy_kwargs(name: str, cfg: dict[str, Any]) -> None:
    """Raise if ``cfg`` has a key the policy's constructor does not take (names the key)."""
    params = inspect.signature(policy_class(name).__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    accepted = [p for p in params if p not in ("self", "observation_space", "action_space")]
    for key in cfg:
        if key not in accepted:
            raise ValueError(f"policy.kwargs.{key}: unknown option for policy {name!r}; accepted: {', '.join(accepted)}")


def make_policy(name: str, observation_space, action_space, **cfg) -> Policy:
    """Build a policy by registered name (see the module docstring)."""
    check_policy_kwargs(name, cfg)
    return policy_class(name)(observation_space, action_space, **cfg)


__all__ = ["Policy", "available_policies", "check_policy_kwargs", "make_policy", "policy_class", "register_policy"]
