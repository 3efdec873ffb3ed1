"""Scripted experts on privileged simulator state, used by ``vla-gym demos``.

    >>> from vla_gym.data.experts.maniskill import MANISKILL_EXPERTS
    >>> sorted(MANISKILL_EXPERTS)
    ['PushCube']
"""
