"""The machine and the processes: rendering system packages (``system``) and the process start-method
guard once a simulator runs in a process (``fork_guard``).
"""
