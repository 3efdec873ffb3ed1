"""Vector envs: ``make_vec`` over vla_gym's own async (worker processes) and sync vector envs or the GPU-batched
ManiSkill env, and the wrapper-spec parser that configs and code share.

    >>> from vla_gym.vector import make_vec

Modules: :mod:`~vla_gym.vector.envs` (``make_vec``), :mod:`~vla_gym.vector.async_env`, :mod:`~vla_gym.vector.worker`,
:mod:`~vla_gym.vector.respawn`, :mod:`~vla_gym.vector.sync_env`, :mod:`~vla_gym.vector.batching`,
:mod:`~vla_gym.vector.wrapper_spec`. Only gymnasium's public API is used (``gymnasium.vector.VectorEnv``,
``AutoresetMode``, ``gymnasium.vector.utils``, ``gymnasium.error``).
"""
from vla_gym.vector.envs import make_vec

__all__ = ["make_vec"]
