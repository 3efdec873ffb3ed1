"""Meta-World (Farama ``metaworld``, MuJoCo): the backend and ``MetaWorldEnv`` (``env``), cameras (``cameras``).
metaworld is imported only when an env is made.
"""
