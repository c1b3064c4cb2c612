"""How far MuJoCo Warp's frames are from mujoco.Renderer's, per scene: mean abs difference and PSNR.

The EGL batch renderer gives exactly mujoco.Renderer's pixels (tested), so it stands in
for it here. Writes a table (stdout, ``--out`` JSON) and one picture per scene: EGL,
Warp and their absolute difference (x4) for a few poses.

    python bench/compare_renderers.py                        # Warp on the CPU backend
    python bench/compare_renderers.py --tasks Ant-v5 Reacher-v5   # vector tasks, from their cameras, in played states
    python bench/compare_renderers.py --device cuda --out bench/out/renderers_h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from vlmrm_fast import EGLRenderer  # noqa: E402
from vlmrm_fast.envs import humanoid  # noqa: E402
from vlmrm_fast.rendering.warp import WarpRenderer  # noqa: E402

BOXES = """
<mujoco>
  <asset>
    <texture name="grid" type="2d" builtin="checker" rgb1=".2 .3 .4" rgb2=".6 .7 .8" width="256" height="256"/>
    <material name="grid" texture="grid" texrepeat="4 4"/>
  </asset>
  <worldbody>
    <light pos="1 -1 4" dir="-0.2 0.2 -1" castshadow="true"/>
    <geom type="plane" size="3 3 0.1" material="grid"/>
    <body pos="-0.6 0 0.6"><freejoint/><geom type="box" size="0.25 0.25 0.25" rgba="0.9 0.1 0.1 1"/></body>
    <body pos="0.6 0 0.4"><freejoint/><geom type="capsule" size="0.15 0.3" rgba="0.1 0.2 0.9 1"/></body>
    <camera name="front" pos="0 -3 1.4" xyaxes="1 0 0 0 0.4 0.92"/>
  </worldbody>
</mujoco>
"""


def task_states(task: str, size: int, n: int) -> tuple[mujoco.MjModel, str, np.ndarray]:
    """A vector task's model and camera, and ``n`` states it reaches: its resets, then 10 steps of random actions."""
    from vlmrm_fast.envs import get_task
    from vlmrm_fast.physics.batch import BatchSimulator

    batch = get_task(task).vector_task
    model = batch.build_model(size)
    with BatchSimulator(model, n, batch.frame_skip) as sim:
        sim.reset(seed=0, noise=batch.reset_noise)
        rng = np.random.default_rng(0)
        low, high = model.actuator_ctrlrange.T
        for _ in range(10):
            sim.step(rng.uniform(low, high, (n, model.nu)))
        return model, batch.camera, sim.qpos.copy()


def scenes(size: int) -> dict[str, tuple[mujoco.MjModel, str]]:
    return {
        "humanoid tasks, paper scene (textures, skybox, shadows)": (
            humanoid.humanoid_model(humanoid.DEFAULT_SCENE, size),
            humanoid.SCENES[humanoid.DEFAULT_SCENE].camera,
        ),
        "boxes (checker floor, shadows)": (mujoco.MjModel.from_xml_string(BOXES), "front"),
    }


def poses(model: mujoco.MjModel, n: int, seed: int = 0) -> np.ndarray:
    qpos = np.tile(model.qpos0, (n, 1))
    free = 7 if model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE else 0
    rng = np.random.default_rng(seed)
    if model.nq > 14:  # the humanoid: bend the limbs
        qpos[:, free:] += rng.uniform(-0.4, 0.4, (n, model.nq - free))
    else:  # the boxes: lift and turn them
        qpos[:, 2] += rng.uniform(0, 0.4, n)
        qpos[:, 3:7] = quaternions(rng, n)
    return qpos


def quaternions(rng: np.random.Generator, n: int) -> np.ndarray:
    q = rng.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="where Warp renders: cpu or cuda[:N]")
    parser.add_argument("--sizes", type=int, nargs="+", default=[224])
    parser.add_argument("--poses", type=int, default=8)
    parser.add_argument("--tasks", nargs="+", default=[], help="vector tasks instead of the built-in scenes")
    parser.add_argument("--out", default="bench/out/renderers.json")
    args = parser.parse_args()
    import imageio.v3 as iio

    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{'scene':<50} {'px':>5} {'mean abs diff':>14} {'PSNR dB':>8}")
    for size in args.sizes:
        cases = {task: task_states(task, size, args.poses) for task in args.tasks} or {
            name: (model, camera, poses(model, args.poses)) for name, (model, camera) in scenes(size).items()
        }
        for name, (model, camera, qpos) in cases.items():
            with EGLRenderer(model, len(qpos), size, size, camera=camera) as egl:
                expected = egl.render(qpos)
            with WarpRenderer(model, len(qpos), size, size, camera=camera, device=args.device) as warp:
                got = warp.render(qpos)
            diff = np.abs(got.astype(np.int16) - expected.astype(np.int16))
            row = {
                "scene": name,
                "px": size,
                "mean_abs_diff": float(diff.mean()),
                "psnr_db": psnr(got, expected),
                "per_frame_mean_abs_diff": diff.reshape(len(qpos), -1).mean(axis=1).round(2).tolist(),
            }
            rows.append(row)
            print(f"{name:<50} {size:>5} {row['mean_abs_diff']:>14.2f} {row['psnr_db']:>8.1f}")
            shown = min(4, len(qpos))
            sheet = np.concatenate(
                [
                    np.concatenate(list(images[:shown]), axis=1)
                    for images in (expected, got, np.minimum(4 * diff, 255).astype(np.uint8))
                ],
                axis=0,
            )
            picture = out.with_name(f"{out.stem}_{name.split()[0]}_{size}.png")
            iio.imwrite(picture, sheet)
            row["picture"] = str(picture)
    out.write_text(
        json.dumps(
            {"device": args.device, "rows": "EGL (= mujoco.Renderer), Warp, |diff| x4", "results": rows}, indent=2
        )
    )
    print(f"wrote {out} and one picture per scene (rows: EGL = mujoco.Renderer, Warp, |difference| x4)")


if __name__ == "__main__":
    main()
