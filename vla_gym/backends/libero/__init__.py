"""LIBERO on robosuite/MuJoCo: the backend and ``LiberoEnv`` (``env``), cameras (``cameras``), scene
controls for OOD perturbations (``scene``). LIBERO is imported only when an env is made.
"""
