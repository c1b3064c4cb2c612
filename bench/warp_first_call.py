"""What the first WarpRenderer of a process costs: Warp's kernel compilation into its cache.

Two fresh processes, one after the other, each build a renderer of the humanoid tasks' scene
and draw twice: the first process finds Warp's kernel cache as this machine has it (empty on a
fresh machine: MuJoCo Warp's modules compile), the second finds what the first left there.
The cache is Warp's own (``WARP_CACHE_PATH``, else ``~/.cache/warp/<version>``), not moved.

    python bench/warp_first_call.py --device cuda --out bench/out/warp_first_call.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time


def child(device: str, num_envs: int, size: int) -> dict:
    start = time.perf_counter()
    import numpy as np
    import torch
    import warp

    from vlmrm_fast.envs import humanoid
    from vlmrm_fast.rendering.warp import WarpRenderer

    imported = time.perf_counter()
    model = humanoid.humanoid_model(humanoid.DEFAULT_SCENE, size)
    camera = humanoid.SCENES[humanoid.DEFAULT_SCENE].camera
    qpos = np.tile(model.qpos0, (num_envs, 1))

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    with WarpRenderer(model, num_envs, size, size, camera=camera, device=device) as renderer:
        built = time.perf_counter()
        renderer.render(qpos)
        sync()
        first = time.perf_counter()
        renderer.render(qpos)
        sync()
        second = time.perf_counter()
    return {
        "import_s": round(imported - start, 2),
        "construct_s": round(built - imported, 2),
        "first_draw_s": round(first - built, 2),
        "second_draw_s": round(second - first, 3),
        "cache_dir": warp.config.kernel_cache_dir,
    }


def cache_files() -> int:
    """Files in Warp's kernel cache for this Warp version, as Warp resolves its place."""
    import warp

    warp.config.quiet = True
    warp.init()
    root = pathlib.Path(warp.config.kernel_cache_dir)
    return sum(1 for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--timeout", type=float, default=540)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.device, args.envs, args.size)))
        return 0
    result: dict = {
        "device": args.device,
        "num_envs": args.envs,
        "size": args.size,
        "cache_files_before": cache_files(),
    }
    for run in ("first", "second"):
        command = [sys.executable, "-P", __file__, "--child", "--device", args.device]
        command += ["--envs", str(args.envs), "--size", str(args.size)]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=os.environ.copy())
        if done.returncode != 0:
            result[f"{run}_error"] = (done.stderr or done.stdout)[-800:]
            break
        result[f"{run}_process"] = json.loads(done.stdout.strip().splitlines()[-1])
        result[f"{run}_process"]["wall_s"] = round(time.perf_counter() - start, 1)
    result["cache_files_after"] = cache_files()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.out).write_text(text)
    return 1 if any(k.endswith("_error") for k in result) else 0


if __name__ == "__main__":
    sys.exit(main())
