"""MountainCarContinuous drawn with more realistic textures.

The paper found CLIP shapes the MountainCar reward better when the scene looks
like a photograph rather than gymnasium's line drawing. These variants keep the
dynamics and draw: a sky gradient, distant ridges, a grassy hill with soil
texture, a red car with wheels tilted along the slope, and the goal flag.

* :class:`MountainCarContinuousTexturedEnv`: MountainCarContinuous-v0's semantics
  (the episode ends at the flag).
* :class:`PaperMountainCarContinuousTexturedEnv`: the paper's semantics (no early
  termination, sticky ``info["success"]``; see :mod:`vlmrm_fast.envs.classic_control`).

Both draw the paper's own pictures instead when given ``scene_assets``, a folder holding its
``mountain_car_background.png`` and ``mountain_car.png`` (see :mod:`vlmrm_fast.envs.paper_assets`):
:class:`PaperPictures` places them as the paper's code did.
"""

from __future__ import annotations

import math

import numpy as np
from gymnasium.envs.classic_control.continuous_mountain_car import Continuous_MountainCarEnv
from PIL import Image, ImageDraw, ImageFilter

from vlmrm_fast.envs import paper_assets
from vlmrm_fast.envs.classic_control import PaperMountainCarContinuousEnv

WIDTH, HEIGHT = 600, 400


def hill_height(x: np.ndarray | float) -> np.ndarray | float:
    return np.sin(3 * np.asarray(x)) * 0.45 + 0.55


class PaperPictures:
    """The paper's MountainCar frame: its background image on a white 600 x 400 canvas, and its car
    image tilted along the slope, centred 15 pixels above the hill at the car's position.

    Drawn with pygame, the library the paper's code drew with, in the same steps: the paper draws
    in a canvas whose y axis points up (both images flipped upside down first) and flips the
    finished canvas, so that the car's rotation and placement round exactly as they did there.
    """

    CLEARANCE = 15  # pixels between the hill and the car's centre

    def __init__(self, folder: str):
        import pygame

        self._pygame = pygame
        load = lambda name: pygame.image.load(str(paper_assets.find_asset(folder, name)))
        self.background = pygame.transform.flip(load("mountain_car_background.png"), False, True)
        self.car = pygame.transform.flip(load("mountain_car.png"), False, True)

    def draw(self, position: float, min_position: float, max_position: float) -> np.ndarray:
        """The (400, 600, 3) uint8 frame with the car at ``position``."""
        pygame = self._pygame
        scale = WIDTH / (max_position - min_position)
        canvas = pygame.Surface((WIDTH, HEIGHT))
        canvas.fill((255, 255, 255))
        canvas.blit(self.background, (0, 0))
        slope = np.arctan(np.cos(3 * position) * 0.45 * 3)  # the hill's slope angle, as the paper computes it
        car = pygame.transform.rotate(self.car, -math.degrees(slope))
        centre = ((position - min_position) * scale, self.CLEARANCE + hill_height(position) * scale)
        canvas.blit(car, car.get_rect(center=centre))
        canvas = pygame.transform.flip(canvas, False, True)
        return np.ascontiguousarray(pygame.surfarray.array3d(canvas).transpose(1, 0, 2))


class TexturedRendering:
    """``render()`` draws the textured scene (or the paper's pictures, :attr:`scene_assets`); mixed
    into a ``Continuous_MountainCarEnv``."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}
    width, height = WIDTH, HEIGHT
    scene_assets: str | None = None  # a folder with the paper's pictures; None: the drawn scene
    _background: Image.Image | None = None
    _paper_pictures: PaperPictures | None = None

    def _use_scene_assets(self, scene_assets: str | None) -> None:
        if scene_assets is not None and (self.width, self.height) != (WIDTH, HEIGHT):
            raise ValueError(f"scene_assets: the paper's pictures are {WIDTH} x {HEIGHT}; leave width and height be")
        if scene_assets is not None:
            paper_assets.find_asset(scene_assets, "mountain_car_background.png")  # refused now, not at render
            paper_assets.find_asset(scene_assets, "mountain_car.png")
        self.scene_assets = scene_assets

    @staticmethod
    def _check_render_mode(render_mode: str | None) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array'")

    # world x in [min_position, max_position] -> pixel column; height in [0, 1.1] -> pixel row
    def _scales(self) -> tuple[float, float]:
        """Pixels per world unit, horizontally and vertically."""
        return self.width / (self.max_position - self.min_position), self.height * 0.78 / 1.1

    def _to_pixels(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sx, sy = self._scales()
        return (np.asarray(x) - self.min_position) * sx, self.height * 0.88 - np.asarray(y) * sy

    def _draw_background(self) -> Image.Image:
        w, h = self.width, self.height
        rows = np.linspace(0.0, 1.0, h)[:, None, None]
        zenith, horizon = np.array([70, 130, 200]), np.array([200, 225, 240])
        sky = (zenith + (horizon - zenith) * rows**0.7).repeat(w, axis=1)
        image = Image.fromarray(sky.astype(np.uint8))
        draw = ImageDraw.Draw(image)
        rng = np.random.default_rng(7)  # the scenery is fixed: same picture every episode
        # distant ridges
        xs = np.linspace(0, w, 60)
        ridge = h * 0.45 + 25 * np.sin(xs / 55.0) + 15 * np.sin(xs / 23.0 + 1.3)
        draw.polygon([(0, h)] + list(zip(xs, ridge)) + [(w, h)], fill=(120, 140, 160))
        # the hill: soil below a grass band, with speckle texture
        wx = np.linspace(self.min_position, self.max_position, w)
        px, py = self._to_pixels(wx, hill_height(wx))
        draw.polygon([(0, h)] + list(zip(px, py)) + [(w, h)], fill=(110, 85, 55))
        for offset, colour in ((0, (70, 140, 50)), (4, (60, 120, 45)), (9, (85, 155, 60))):
            draw.line(list(zip(px, py + offset)), fill=colour, width=10)
        texture = np.asarray(image).astype(np.int16)
        noise = rng.integers(-18, 19, (h, w, 1))
        ground = np.zeros((h, w), bool)
        for col in range(w):
            ground[int(py[col]) :, col] = True
        texture[ground] += noise[ground]
        image = Image.fromarray(np.clip(texture, 0, 255).astype(np.uint8)).filter(ImageFilter.SMOOTH)
        draw = ImageDraw.Draw(image)
        # goal flag
        fx, fy = self._to_pixels(self.goal_position, hill_height(self.goal_position))
        fx, fy = float(fx), float(fy)
        draw.line([(fx, fy), (fx, fy - 50)], fill=(60, 60, 60), width=3)
        draw.polygon([(fx, fy - 50), (fx + 28, fy - 42), (fx, fy - 34)], fill=(240, 200, 20))
        return image

    def _draw_car(self, image: Image.Image, position: float) -> None:
        sx, sy = self._scales()
        slope_angle = math.atan(0.45 * 3 * math.cos(3 * position) * sy / sx)  # counterclockwise, in pixels
        cx, cy = self._to_pixels(position, hill_height(position))
        cx, cy = float(cx), float(cy)
        car = Image.new("RGBA", (70, 50), (0, 0, 0, 0))
        d = ImageDraw.Draw(car)
        d.rounded_rectangle([5, 18, 65, 36], radius=6, fill=(200, 30, 30), outline=(90, 10, 10))
        d.polygon([(18, 18), (26, 6), (48, 6), (56, 18)], fill=(185, 25, 25), outline=(90, 10, 10))
        d.polygon([(22, 17), (28, 9), (36, 9), (36, 17)], fill=(170, 210, 240))
        d.polygon([(39, 17), (39, 9), (47, 9), (52, 17)], fill=(170, 210, 240))
        for wheel_x in (18, 52):
            d.ellipse([wheel_x - 8, 30, wheel_x + 8, 46], fill=(25, 25, 25))
            d.ellipse([wheel_x - 3, 35, wheel_x + 3, 41], fill=(160, 160, 160))
        rotated = car.rotate(math.degrees(slope_angle), resample=Image.BICUBIC, expand=True)
        image.paste(rotated, (int(cx - rotated.width / 2), int(cy - rotated.height + 6)), rotated)

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        if self.scene_assets is not None:
            if self._paper_pictures is None:
                self._paper_pictures = PaperPictures(self.scene_assets)
            return self._paper_pictures.draw(float(self.state[0]), self.min_position, self.max_position)
        if self._background is None:
            self._background = self._draw_background()
        image = self._background.copy()
        self._draw_car(image, float(self.state[0]))
        return np.asarray(image.convert("RGB"))


class MountainCarContinuousTexturedEnv(TexturedRendering, Continuous_MountainCarEnv):
    """Same dynamics, rewards and termination as MountainCarContinuous-v0; ``render()`` draws a textured scene."""

    def __init__(
        self,
        render_mode: str | None = "rgb_array",
        goal_velocity: float = 0.0,
        width: int = WIDTH,
        height: int = HEIGHT,
        scene_assets: str | None = None,
    ):
        self._check_render_mode(render_mode)
        super().__init__(render_mode=render_mode, goal_velocity=goal_velocity)
        self.width, self.height = width, height
        self._use_scene_assets(scene_assets)


class PaperMountainCarContinuousTexturedEnv(TexturedRendering, PaperMountainCarContinuousEnv):
    """The paper's MountainCar semantics (:class:`~vlmrm_fast.envs.classic_control.PaperMountainCarContinuousEnv`)
    drawn with textures."""

    def __init__(
        self,
        render_mode: str | None = "rgb_array",
        goal_velocity: float = 0.0,
        absorbing: bool = False,
        width: int = WIDTH,
        height: int = HEIGHT,
        scene_assets: str | None = None,
    ):
        self._check_render_mode(render_mode)
        super().__init__(render_mode=render_mode, goal_velocity=goal_velocity, absorbing=absorbing)
        self.width, self.height = width, height
        self._use_scene_assets(scene_assets)
