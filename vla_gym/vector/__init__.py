"""Vector envs: ``make_vec`` over gymnasium's Sync/Async envs or the GPU-batched ManiSkill env, and the
wrapper-spec parser that configs and code share.

    >>> from vla_gym.vector import make_vec
"""
from vla_gym.vector.envs import make_vec

__all__ = ["make_vec"]
