"""What PPO and GRPO share: the on-policy update loop (``on_policy``), the SB3-style front end
(``sb3_api``), advantages (GAE, group-relative) and the clipped losses.
"""
