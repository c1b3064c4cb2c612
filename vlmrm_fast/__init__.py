import mujoco  # noqa: F401  (loads libmujoco for _core)
