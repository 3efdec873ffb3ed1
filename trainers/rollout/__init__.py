"""Collecting experience: PPO's rollout collector and buffer, observation batching, pipelined stepping,
and the episode runner that plays given (task, init state, seed) episodes over N envs (``episode_plan``: the
specs; ``scheduling``: the task-affine queue; ``episode_runner``: the runner).
"""
