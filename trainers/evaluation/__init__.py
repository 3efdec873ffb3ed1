"""Evaluation during and after training: periodic evaluation with videos (``periodic``) and the OOD
report (``ood``).
"""
