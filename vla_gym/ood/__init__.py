"""Out-of-distribution evaluation: seeded perturbations of an episode (lighting, camera pose, paraphrase,
action noise, ...), grouped into the Vision / Semantic / Execution categories.

The scene side of each perturbation lives with its simulator (``backends/<sim>/scene.py``); the
wrapper is ``vla_gym.wrappers.Perturb``.
"""
