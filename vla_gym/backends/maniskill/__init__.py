"""ManiSkill3 on SAPIEN: the CPU backend and ``ManiSkillEnv`` (``env``), cameras (``cameras``), scene
controls (``scene``) and the GPU-batched vector env (``gpu``). mani_skill is imported only when used.
"""
