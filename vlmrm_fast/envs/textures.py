"""Procedural textures for the humanoid's paper scene, drawn with numpy.

Rocamonde et al. (2024, Section 4.3) render the humanoid under a photographic
sky with clouds, on dark stone floor tiles, with a light brushed-metal robot;
their image files are not ours to ship, so these functions draw textures of the
same kind from fixed seeds (the same pixels on every machine and every call):

* :func:`sky_cube`: a cube map (6 faces stacked, MuJoCo's layout) of a blue sky,
  deep at the zenith and hazy at the horizon, with fractal-noise clouds. The
  clouds are sampled from 3D noise at each texel's view direction, so the faces
  meet without seams.
* :func:`stone_tiles`: dark slate slabs laid in courses with dark joints; the
  image tiles seamlessly (the floor repeats it 60 x 60 times).
* :func:`brushed_metal`: light grey with fine diagonal streaks, for all six faces
  of the robot's cube texture.

All return uint8 RGB arrays, cached: every env that builds the scene shares them.
"""

from __future__ import annotations

import functools

import numpy as np

SKY_FACE = 256  # texels per cube-map face side
TILES_SIZE = 512  # the floor image, square
METAL_FACE = 128  # texels per robot cube face side


def _smoothstep(t: np.ndarray) -> np.ndarray:
    return t * t * (3.0 - 2.0 * t)


def _periodic_noise_2d(size: int, cells: int, rng: np.random.Generator) -> np.ndarray:
    """(size, size) value noise in [0, 1] on a ``cells`` x ``cells`` lattice that wraps around."""
    lattice = rng.random((cells, cells))
    coords = np.arange(size) * (cells / size)
    i0 = np.floor(coords).astype(int)
    t = _smoothstep(coords - i0)
    i0, i1 = i0 % cells, (i0 + 1) % cells
    rows = lattice[i0][:, None, :] * (1 - t)[:, None, None] + lattice[i1][:, None, :] * t[:, None, None]
    rows = rows[:, 0, :]  # (size, cells): interpolated along y
    return rows[:, i0] * (1 - t)[None, :] + rows[:, i1] * t[None, :]


def periodic_fbm_2d(size: int, base_cells: int, octaves: int, seed: int, persistence: float = 0.5) -> np.ndarray:
    """Fractal (multi-octave) value noise in [0, 1] that tiles seamlessly; ``size`` a multiple of the finest lattice."""
    rng = np.random.default_rng(seed)
    total, weight, amplitude = np.zeros((size, size)), 0.0, 1.0
    for octave in range(octaves):
        total += amplitude * _periodic_noise_2d(size, base_cells * 2**octave, rng)
        weight += amplitude
        amplitude *= persistence
    return total / weight


def _noise_3d(points: np.ndarray, cells: int, rng: np.random.Generator) -> np.ndarray:
    """Value noise in [0, 1] at ``points`` (N, 3) in [-1, 1]^3, lattice of ``cells`` per side."""
    lattice = rng.random((cells + 1, cells + 1, cells + 1))
    coords = (points + 1.0) * 0.5 * cells
    i0 = np.clip(np.floor(coords).astype(int), 0, cells - 1)
    t = _smoothstep(coords - i0)
    out = np.zeros(len(points))
    for corner in range(8):
        offset = np.array([(corner >> axis) & 1 for axis in range(3)])
        weight = np.prod(np.where(offset, t, 1.0 - t), axis=1)
        index = i0 + offset
        out += weight * lattice[index[:, 0], index[:, 1], index[:, 2]]
    return out


def cube_directions(face_size: int) -> np.ndarray:
    """(6, S, S, 3) unit world directions of the texels of a MuJoCo cube map.

    MuJoCo stores the faces in OpenGL's order (+X, -X, +Y, -Y, +Z, -Z of OpenGL's
    frame, whose y axis is MuJoCo's up): world ``(x, y, z)`` is OpenGL ``(x, z, -y)``.
    Within a face, OpenGL's cube-map rules map the texel column to ``s`` and the row to ``t``.
    """
    centres = (np.arange(face_size) + 0.5) / face_size * 2.0 - 1.0
    sc, tc = np.meshgrid(centres, centres)  # sc varies along a row (columns), tc down the rows
    one = np.ones_like(sc)
    gl = [  # OpenGL direction (x, y, z) of each face's texels
        (one, -tc, -sc),  # +X
        (-one, -tc, sc),  # -X
        (sc, one, tc),  # +Y (world up)
        (sc, -one, -tc),  # -Y (world down)
        (sc, -tc, one),  # +Z (world -y)
        (-sc, -tc, -one),  # -Z (world +y)
    ]
    world = np.stack([np.stack([x, -z, y], axis=-1) for x, y, z in gl])
    return world / np.linalg.norm(world, axis=-1, keepdims=True)


@functools.cache
def sky_cube(face_size: int = SKY_FACE) -> np.ndarray:
    """(6 * S, S, 3) uint8: the sky's six faces stacked in MuJoCo's order."""
    directions = cube_directions(face_size).reshape(-1, 3)
    elevation = directions[:, 2]
    up = np.clip(elevation, 0.0, 1.0)[:, None]
    zenith, horizon, haze = np.array([0.13, 0.40, 0.80]), np.array([0.62, 0.79, 0.95]), np.array([0.78, 0.85, 0.92])
    sky = horizon + (zenith - horizon) * up**0.6
    sky = np.where(elevation[:, None] < 0.0, haze, sky)  # below the horizon: haze behind the floor's far edge
    rng = np.random.default_rng(2024)
    # Clouds: fractal 3D noise on the view sphere (upper half only: the floor hides the rest),
    # squashed vertically so that they lie in a layer and thin out towards the horizon.
    above = elevation > -0.05
    points = directions[above] * np.array([1.0, 1.0, 1.6])
    points /= np.abs(points).max()
    density, weight, amplitude = np.zeros(len(points)), 0.0, 1.0
    for cells in (5, 10, 20, 40, 80):
        density += amplitude * _noise_3d(points, cells, rng)
        weight += amplitude
        amplitude *= 0.6
    density /= weight
    cover = np.zeros(len(directions))
    cover[above] = _smoothstep(np.clip((density - 0.47) / 0.16, 0.0, 1.0))
    cover *= _smoothstep(np.clip(elevation / 0.12, 0.0, 1.0))
    shade = np.zeros(len(directions))
    shade[above] = np.clip(density - 0.62, 0.0, 0.3)
    cloud = np.array([0.98, 0.98, 0.99]) - 0.4 * shade[:, None]  # the thickest parts a little grey
    rgb = sky * (1 - 0.95 * cover[:, None]) + cloud * 0.95 * cover[:, None]
    return _to_uint8(rgb.reshape(6 * face_size, face_size, 3))


@functools.cache
def stone_tiles(size: int = TILES_SIZE, courses: int = 4) -> np.ndarray:
    """(S, S, 3) uint8: dark slate slabs in ``courses`` rows with offset joints; tiles seamlessly."""
    rng = np.random.default_rng(7)
    columns = np.arange(size)
    slab = np.zeros((size, size), dtype=int)  # which slab each texel belongs to
    joint = np.zeros((size, size), dtype=bool)
    heights = rng.uniform(0.8, 1.2, courses)
    tops = np.floor(np.cumsum(np.append(0.0, heights[:-1])) / heights.sum() * size).astype(int)
    count = 0
    for top, bottom in zip(tops, [*tops[1:], size]):
        n = int(rng.integers(2, 4))  # slabs in this course
        widths = rng.uniform(0.7, 1.3, n)
        starts = np.floor(np.cumsum(np.append(0.0, widths[:-1])) / widths.sum() * size).astype(int)
        first = int(rng.integers(0, size))  # where this course's first joint falls: courses do not line up
        slab[top:bottom] = count + np.searchsorted(starts, (columns - first) % size, side="right") - 1
        for start in starts:
            joint[top:bottom, (first + start + np.arange(-1, 2)) % size] = True
        joint[(top + np.arange(-1, 2)) % size, :] = True
        count += n
    # Per-slab tone: dark slate grey, a touch bluer or warmer, some lighter.
    tones = rng.uniform(0.17, 0.30, (count, 1)) * rng.uniform(0.96, 1.04, (count, 3)) * np.array([0.98, 1.0, 1.03])
    # Mottling (large) and grain (fine), each slab sampling the noise at its own offset.
    mottle = periodic_fbm_2d(size, 4, 5, seed=11)
    grain = periodic_fbm_2d(size, 64, 2, seed=12)
    shifts = rng.integers(0, size, (count, 2))[slab]
    ys = (columns[:, None] + shifts[..., 0]) % size
    xs = (columns[None, :] + shifts[..., 1]) % size
    shade = 1.0 + 1.1 * (mottle[ys, xs] - 0.5) + 0.36 * (grain[ys, xs] - 0.5)
    rgb = tones[slab] * np.clip(shade, 0.4, 1.6)[..., None]
    rgb[joint] = 0.06
    return _to_uint8(rgb)


@functools.cache
def brushed_metal(face_size: int = METAL_FACE) -> np.ndarray:
    """(6 * S, S, 3) uint8: light grey with fine diagonal streaks, the same on all six faces."""
    rng = np.random.default_rng(3)
    # Streaks: a 1D noise across the diagonal (u = x + y), wrapped so the face tiles.
    u = (np.arange(face_size)[:, None] + np.arange(face_size)[None, :]) % face_size
    fine, coarse = rng.random(face_size), rng.random(face_size // 8)
    coarse_at = np.interp(np.arange(face_size), np.arange(0, face_size, 8), coarse, period=face_size)
    streaks = 0.65 * fine[u] + 0.35 * coarse_at[u]
    speckle = rng.random((face_size, face_size))
    grey = 0.80 + 0.13 * streaks + 0.03 * speckle
    face = np.repeat(grey[..., None], 3, axis=2) * np.array([0.99, 1.0, 1.01])
    return _to_uint8(np.tile(face, (6, 1, 1)))


def _to_uint8(rgb: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.clip(np.round(rgb * 255.0), 0, 255).astype(np.uint8))
