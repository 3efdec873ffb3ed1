"""ManiSkill calls without autograd: the CPU backend's and its scene controls' methods run under it.

    @without_autograd
    def step(self, action): ...
"""
from __future__ import annotations

import functools


def without_autograd(method):
    """Run a method that calls ManiSkill under ``torch.inference_mode()``.

    ManiSkill's CPU controller does its pose algebra in many batch-1 torch ops; without autograd's bookkeeping
    each is cheaper (state-only PickCube: 12 % faster than raw ManiSkill, ``python benchmarks/bench_maniskill.py
    --modes state --episodes 40``, docs/maniskill.md).
    Tensors ManiSkill makes in that mode can only be changed in place in that mode, so every backend and scene
    method that touches ManiSkill runs under it.
    """
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        import torch  # here, not at the top: torch comes with the ManiSkill extra, not vla_gym's core install

        with torch.inference_mode():
            return method(*args, **kwargs)
    return wrapper
