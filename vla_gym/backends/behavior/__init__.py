"""BEHAVIOR-1K on OmniGibson/Isaac Sim: the OmniGibson calls (``env``) and the R1 Pro's pure-numpy
mappings (``r1pro``: 23-D actions, proprio, the env config).
"""
