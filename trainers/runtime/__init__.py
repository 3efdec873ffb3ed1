"""Running a trainer: configs and overrides, the command line, the run directory and resume,
checkpoints, logging, torch.distributed and each rank's envs.
"""
