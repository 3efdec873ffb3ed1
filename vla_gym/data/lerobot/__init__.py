"""Demonstration datasets in LeRobot's v3 layout (parquet episodes, ``meta/info.json``, stats).
"""
