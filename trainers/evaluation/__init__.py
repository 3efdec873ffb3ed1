"""Evaluation during and after training: periodic evaluation with videos (``periodic``), the OOD
report (``ood``) and the per-task report of played episodes (``report``).
"""
