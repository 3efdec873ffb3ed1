"""ManiSkill's camera roles: role -> ManiSkill sensor uid."""

CAMERAS = {"main": "base_camera", "wrist": "hand_camera"}
