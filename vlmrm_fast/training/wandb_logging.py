"""Weights & Biases for ``vlmrm-fast train`` (``logging.wandb: {project, mode}``, ``pip install 'vlmrm-fast[wandb]'``).

W&B's own TensorBoard integration carries the scalars: ``wandb.init(sync_tensorboard=True)`` mirrors
every TensorBoard event file the run writes, so W&B gets exactly TensorBoard's curves (SB3's
records, the VLM and ground-truth episode rewards) at the same steps, with no second logging path
to keep in step with the first. What TensorBoard does not hold, the policy videos (mp4 files whose
path the video callback records as ``video/path``), goes through :class:`WandbVideos`, an SB3 output
format that logs each as a ``wandb.Video``. The run's resolved config is the W&B run's config.

A run's W&B id is kept in the run folder (``wandb_run_id``): ``--resume`` continues that W&B run
(``resume="allow"``). ``mode: offline`` writes everything under ``<run>/wandb/`` for ``wandb sync``.
"""

from __future__ import annotations

import secrets
from typing import Any

from stable_baselines3.common.logger import KVWriter

from vlmrm_fast.models.errors import MissingDependencyError, installed
from vlmrm_fast.training.run_files import RunFiles
from vlmrm_fast.training.run_folder import WANDB_RUN_ID as RUN_ID_FILE


def check_installed() -> None:
    """A MissingDependencyError in one line when wandb is not installed (checked before a start changes the
    run folder: a refusal then has changed nothing)."""
    if not installed("wandb"):
        raise MissingDependencyError(
            "logging.wandb needs wandb, which is not installed: pip install 'vlmrm-fast[wandb]' "
            "(from a checkout: pip install '.[wandb]')"
        )


def start_run(cfg: Any, files: RunFiles, *, resumed: bool) -> Any:
    """Starts (or, for a resumed training run, continues) the W&B run of ``cfg.logging.wandb``; its id goes
    on the run's record (``files``)."""
    settings = cfg.logging.wandb
    check_installed()
    import wandb

    run_dir = files.folder
    id_file = run_dir / RUN_ID_FILE
    run_id = id_file.read_text().strip() if resumed and id_file.is_file() else secrets.token_hex(6)
    files.write_text(RUN_ID_FILE, run_id + "\n")
    return wandb.init(
        project=settings.project,
        mode=settings.mode,
        id=run_id,
        resume="allow",
        dir=str(run_dir),
        config=cfg.to_dict(),
        sync_tensorboard=True,
    )


class WandbVideos(KVWriter):
    """An SB3 output format that sends each recorded policy video (``video/path``) to W&B."""

    def __init__(self, run: Any):
        self.run = run

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        path = key_values.get("video/path")
        if path:
            import wandb

            self.run.log({"video/policy": wandb.Video(str(path), format="mp4"), "global_step": step})

    def close(self) -> None:
        pass
