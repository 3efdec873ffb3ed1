"""One simulator per subpackage behind the :class:`~vla_gym.backends.base.Backend` contract.

``base`` holds the contract and ``TaskSpec``; ``libero/``, ``maniskill/`` and ``behavior/`` each hold the
backend, its ``VLAEnv`` subclass (the gym entry point) and its scene controls. Nothing here imports a
simulator at import time.
"""
