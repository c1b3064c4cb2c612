"""The paper's own image files, found by name in a folder the user points to (``scene_assets``).

Rocamonde et al.'s code (github.com/AlignmentResearch/vlmrm) ships photographs for its scenes:
the humanoid's sky, floor tiles and robot skin, and MountainCar's background and car. They are
not ours to ship, so by default the tasks draw textures of the same kind
(:mod:`vlmrm_fast.envs.textures`, :mod:`vlmrm_fast.envs.mountain_car`). Given ``scene_assets``,
a checkout of the paper's repository (or any folder holding files of these names), the tasks
load the paper's files instead and draw them as the paper's code did.

A file is looked for in the folder itself, then where the paper's repository keeps it.
"""

from __future__ import annotations

import os
import pathlib

#: The humanoid scene's textures: the skybox, the floor's 2D texture, the robot's cube texture.
HUMANOID_FILES = ("sky.png", "tiles.png", "robot.png")
#: MountainCar's 600 x 400 background and its car sprite.
MOUNTAIN_CAR_FILES = ("mountain_car_background.png", "mountain_car.png")
#: Where a checkout of the paper's repository keeps each file, relative to its root.
CHECKOUT_FOLDERS = {
    **dict.fromkeys(HUMANOID_FILES, "src/vlmrm/envs/mujoco"),
    **dict.fromkeys(MOUNTAIN_CAR_FILES, "src/vlmrm/envs/classic_control"),
}
PAPER_REPOSITORY = "https://github.com/AlignmentResearch/vlmrm"
HOW_TO_GET = f"git clone {PAPER_REPOSITORY} and give the clone's folder"


def normalized_folder(folder: str | os.PathLike) -> str:
    """``folder`` with ``~`` expanded, made absolute (the path every rank and process sees)."""
    return str(pathlib.Path(os.path.expanduser(os.fspath(folder))).absolute())


def candidates(folder: str | os.PathLike, name: str) -> list[pathlib.Path]:
    """Where ``name`` is looked for in ``folder``, in order."""
    root = pathlib.Path(folder)
    places = [root / name]
    if name in CHECKOUT_FOLDERS:
        places.append(root / CHECKOUT_FOLDERS[name] / name)
    return places


def find_asset(folder: str | os.PathLike, name: str) -> pathlib.Path:
    """The file ``name`` in ``folder`` (see :func:`candidates`); FileNotFoundError names the places tried."""
    places = candidates(folder, name)
    for place in places:
        if place.is_file():
            return place
    raise FileNotFoundError(
        f"scene_assets: no {name} in {folder} (looked at {', '.join(map(str, places))}); {HOW_TO_GET}"
    )


def missing_assets(folder: str | os.PathLike, names: tuple[str, ...]) -> list[str]:
    """The files of ``names`` that ``folder`` lacks."""
    return [name for name in names if not any(place.is_file() for place in candidates(folder, name))]
