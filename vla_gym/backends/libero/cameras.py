"""LIBERO's camera roles: role -> robosuite camera name."""

CAMERAS = {"main": "agentview", "wrist": "robot0_eye_in_hand"}
