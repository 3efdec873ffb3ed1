"""Meta-World's camera roles (role -> camera in Meta-World's scene XML) and how each camera's frames are turned.

Meta-World's fixed ``corner`` cameras are rolled upside down in its XML (their image "up" axis points at the
floor), so their frames are rotated by 180 degrees to be right side up: an in-plane rotation, not a mirror
(``tests/test_metaworld.py`` checks it against the cameras' poses). ``topview`` looks straight down with the
robot at the bottom and is used as rendered, as is the hand camera ``gripperPOV`` (``wrist``).

    >>> CAMERAS["main"], ROTATED_180["corner4"]
    ('corner4', True)
"""

#: role -> Meta-World camera; ``main`` can be any of :data:`MAIN_CAMERAS` (``MetaWorldEnv(main_camera=...)``)
CAMERAS = {"main": "corner4", "wrist": "gripperPOV"}
#: Meta-World's fixed cameras that can serve as ``main``
MAIN_CAMERAS = ("corner", "corner2", "corner3", "corner4", "topview")
#: camera -> whether its frames are rotated by 180 degrees to be right side up
ROTATED_180 = {"corner": True, "corner2": True, "corner3": True, "corner4": True, "topview": False,
               "gripperPOV": False}
