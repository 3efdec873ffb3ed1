"""Demonstrations: scripted experts (``experts/``), the LeRobot v3 dataset format (``lerobot/``) and
``record`` (``vla-gym demos``: expert episodes -> dataset, parallel and resumable).
"""
