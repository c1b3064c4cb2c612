"""A run folder belongs to one run, and holds the user's files beside it untouched.

``train`` without ``--resume`` refuses a folder that holds a run's files (unless told to
overwrite them); ``--overwrite`` deletes only the files the run's records vouch for (its
record ``run_files.json`` and its checkpoints' manifests, :class:`Inventory`), after listing
them, and never the config file given; it refuses while a file the run would write over is
on no record. ``--resume`` continues only from a checkpoint whose run identity (the config
fields that define the run, :func:`~vlmrm_fast.training.config.run_identity`) matches the
config given, and takes the newest intact one (checksums compared), never starting from
scratch and never writing over a checkpoint: damaged files and checkpoints newer than the one
resumed from are moved into ``checkpoints/damaged/``. A run whose final model is whole on its
record at ``rl.total_timesteps`` is finished: ``--resume`` says so and changes nothing.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import stat
from typing import Any

from vlmrm_fast.failures import ExpectedFailure
from vlmrm_fast.physics import PHYSICS
from vlmrm_fast.training import checkpoints
from vlmrm_fast.training.config import identity_differences, upgraded_identity
from vlmrm_fast.training.curves import CURVES_CSV, CURVES_PNG
from vlmrm_fast.training.run_files import RECORD, RunFiles, relative_to

CONFIG_FILE = "config.yaml"
FINAL_MODEL = "final_model.zip"
ROLLOUTS = "rollouts"  # vlmrm-fast rollout's CSVs and videos
RANKING_FILE = "best_checkpoints.csv"  # vlmrm-fast best's ranking
WANDB_RUN_ID = "wandb_run_id"  # the W&B run's id, kept for a resume (wandb_logging.py)
# The files a run writes at the top of its folder; with its TensorBoard folder, its policy videos and its
# checkpoints, the places a start refuses to write over a file that no record shows a run wrote.
_RUN_FILES = (CONFIG_FILE, FINAL_MODEL, CURVES_CSV, CURVES_PNG, WANDB_RUN_ID, RECORD)
# The folders it writes in (damaged/: where checkpoint files are set aside): its own, never links.
_RUN_FOLDERS = ("checkpoints", f"checkpoints/{checkpoints.DAMAGED_DIR}", "videos", "tensorboard", ROLLOUTS)
_POLICY_VIDEO = re.compile(r"^videos/policy_\d+_steps\.mp4$")


@dataclasses.dataclass
class Inventory:
    """A run folder's files (paths relative to it), by what a run may do with them.

    ``owned``: on a record of the run's (``run_files.json``, a checkpoint's manifest), as the run wrote
    them, or what a kill provably cut short: ``--overwrite`` deletes exactly these. ``aside``: checkpoint
    files no manifest vouches for: ``--overwrite`` moves them into ``checkpoints/damaged/``, as ``--resume``
    does. ``in_the_way``: files where the run writes (``config.yaml``, ``final_model.zip``, the curves, its
    TensorBoard folder, its policy videos) that no record vouches for: a start refuses to write over them.
    ``kept``: every other file (the user's, ``checkpoints/damaged/``, the config file given): never touched.
    """

    folder: pathlib.Path
    owned: list[str]
    checkpoints: int
    aside: list[checkpoints.Damaged]
    in_the_way: list[str]
    kept: list[str]

    def holds_a_run(self) -> bool:
        return bool(self.owned or self.aside)

    def count(self) -> str:
        return f"{len(self.owned)} file{'s' if len(self.owned) != 1 else ''}"

    def describe(self) -> str:
        """``config.yaml, learning_curves.csv, 3 checkpoints (6 files), tensorboard/ (1 file)``: what is owned."""
        top = [r for r in self.owned if "/" not in r and r != RECORD]
        folders: dict[str, int] = {}
        for relative in self.owned:
            if "/" in relative:
                folder = relative.split("/")[0]
                folders[folder] = folders.get(folder, 0) + 1
        parts = list(top)
        for folder, n in folders.items():
            files = f"{n} file{'s' if n != 1 else ''}"
            if folder == "checkpoints" and self.checkpoints:
                parts.append(f"{self.checkpoints} checkpoint{'s' if self.checkpoints != 1 else ''} ({files})")
            else:
                parts.append(f"{folder}/ ({files})")
        if self.aside:
            n = sum(len(d.files) for d in self.aside)
            parts.append(
                f"{n} checkpoint file{'s' if n != 1 else ''} no manifest vouches for (set aside by --overwrite)"
            )
        return ", ".join(parts) or RECORD


class RunFolderError(ExpectedFailure):
    """The run folder cannot be used as asked (in use, another run's checkpoint, a missing replay buffer)."""


def plain(identity: dict[str, Any]) -> dict[str, Any]:
    """The identity as it reads back from JSON (lists, not tuples), so saved and current compare equal."""
    return json.loads(json.dumps(identity, sort_keys=True))


def _identity_of(checkpoint: checkpoints.Checkpoint) -> dict[str, Any]:
    """The run identity a checkpoint's manifest holds, in the current layout."""
    return upgraded_identity(checkpoint.manifest.get("identity") or {})


def _same_run(checkpoint: checkpoints.Checkpoint, identity: dict[str, Any]) -> bool:
    return not identity_differences(_identity_of(checkpoint), identity)


#: The choices of a run's stack that "auto" makes from the machine (``env.physics``, ``env.renderer``), recorded
#: in each checkpoint beside the run identity (which holds the config as written): a resume elsewhere that
#: would choose otherwise is refused, naming the value to pin.
RESOLVED_CHOICES = ("env.physics", "env.renderer")


def resolved_choices(plan: Any) -> dict[str, Any]:
    """``{"env.physics": "batch", "env.renderer": "egl"}``: what the stack's plan (``stack.plan.StackPlan``) runs."""
    return {place: getattr(plan.env, place.split(".")[1]) for place in RESOLVED_CHOICES}


def check_resumed_choices(saved: dict[str, Any] | None, plan: Any) -> None:
    """Refuses a resume whose plan chooses another physics or renderer than the run's checkpoint records (its
    config leaves them "auto", which resolves by the machine: EGL on a GPU, Warp on a CPU), in one line naming
    both and the value to pin. A checkpoint that records none (saved before they were recorded) is not compared."""
    if not isinstance(saved, dict):
        return
    now = resolved_choices(plan)
    changed = [place for place in RESOLVED_CHOICES if place in saved and saved[place] != now[place]]
    if saved.get("env.physics") == now["env.physics"] and not PHYSICS[now["env.physics"]].in_simulator_env:
        # gymnasium envs: the batched drawing draws each env's render() picture exactly, so whether a renderer
        # draws them or they draw themselves changes neither the frames nor the dynamics
        changed = [place for place in changed if place != "env.renderer"]
    if not changed:
        return

    def named(value: Any) -> str:
        return "none (its gymnasium envs drew their frames)" if value is None else repr(value)

    what = "; ".join(
        f"the run's {place.split('.')[1]} was {named(saved[place])} where it started, and {place}: auto chooses "
        f"{named(now[place])} here"
        for place in changed
    )
    pins = " and ".join(f"{place}: {'null' if saved[place] is None else saved[place]}" for place in changed)
    raise RunFolderError(
        f"--resume: {what}; to resume the run as it ran, set {pins} in the config (the frames or the dynamics "
        f"would change otherwise), or start a new run (--output-dir, or --overwrite)"
    )


def identity_hash(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(plain(identity), sort_keys=True).encode()).hexdigest()[:16]


@dataclasses.dataclass
class ResumePoint:
    """What ``--resume`` continues from, and what it does to the folder once the checkpoint has loaded."""

    folder: pathlib.Path  # the checkpoint folder
    checkpoint: checkpoints.Checkpoint  # the newest intact checkpoint (with its replay buffer, where one is needed)
    replay_buffer: bool  # load the checkpoint's replay buffer (off-policy; False: --allow-empty-replay-buffer)
    damaged: list[checkpoints.Damaged]  # moved into checkpoints/damaged/ by apply()
    incomplete: list[pathlib.Path]  # what a kill cut short: removed by apply()
    # The run's final model, a byte copy of the checkpoint's damaged model (their sha256 the manifest's): loaded
    # instead of it, and copied back in its place by apply().
    restore_from: pathlib.Path | None = None

    @property
    def identity(self) -> dict[str, Any]:
        """The run identity the checkpoint's manifest holds."""
        return _identity_of(self.checkpoint)

    @property
    def model_file(self) -> pathlib.Path:
        """The file the model loads from."""
        return self.restore_from or self.checkpoint.model

    def apply(self) -> list[str]:
        """Removes what a kill cut short, moves damage aside, restores a damaged model from the final model;
        returns one line for each."""
        lines = []
        if self.incomplete:
            for path in self.incomplete:
                path.unlink(missing_ok=True)
            lines.append(
                f"--resume: removed {', '.join(p.name for p in self.incomplete)} from {self.folder}: files of a "
                f"checkpoint save that a kill cut short (temporary names, or a save whose manifest never came)"
            )
        for damage in self.damaged:
            moved = checkpoints.set_aside(self.folder, damage.files)
            lines.append(
                f"--resume: damaged checkpoint files ({damage.why}): moved {', '.join(p.name for p in moved)} "
                f"into {self.folder / checkpoints.DAMAGED_DIR} (kept, not loaded)"
            )
        if self.restore_from is not None:
            with open(self.restore_from, "rb") as source:
                checkpoints.write_atomically(self.checkpoint.model, lambda f: shutil.copyfileobj(source, f))
            lines.append(
                f"--resume: restored {self.checkpoint.name} from {self.restore_from.name}, its byte copy (the sha256 "
                f"of {self.checkpoint.manifest_path.name})"
            )
        return lines


def _buffer_lack(checkpoint: checkpoints.Checkpoint, bad_buffers: dict[str, checkpoints.Damaged]) -> str:
    """What is wrong with the replay buffer of an off-policy checkpoint that has none to load."""
    if checkpoint.name in bad_buffers:
        return f"its replay buffer is damaged ({bad_buffers[checkpoint.name].why})"
    entry = checkpoint.manifest["files"].get("replay_buffer")
    return (
        f"its replay buffer {entry['name']} is missing"
        if isinstance(entry, dict)
        else "it was saved without a replay buffer"
    )


LOCK_FILE = ".vlmrm-fast.lock"  # a name of this program's own: a .lock of another tool's is never touched
_LOCK_TEXT = re.compile(r"^(\d+\n)?$")  # what RunLock writes into it: the holder's pid (nothing, a moment before)


class RunLock:
    """An exclusive lock on a run folder (``.vlmrm-fast.lock``, an flock) for as long as a process trains in it.

    Two processes in one folder would interleave checkpoints, and a resume would delete
    the other's files in the making as incomplete. The kernel drops the lock when the
    holder dies, even by SIGKILL (the file then stays, and the next run takes it over).
    On release the file is removed, while still locked: a process that opened the file
    before that finds, once it holds the lock, that the name no longer leads to the
    file it locked, and tries again. A folder created only to hold the lock of a start
    that is then refused is removed again on release. The name is opened without following a
    link (a lock creates and writes nothing outside its folder); whatever is there that is no
    lock of this program's (a link, a folder, another name of a file elsewhere, a file that
    holds anything but a pid) is refused, and left as it is.
    """

    def __init__(self, folder: pathlib.Path):
        self.folder = folder
        self.created = not folder.exists()
        self.path = folder / LOCK_FILE
        self.fd: int | None = None
        for _ in range(100):  # another process removing the file between our open and flock: open again
            self._open()
            assert self.fd is not None
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(self.fd)  # not ours: the holder's lock file stays
                self.fd = None
                raise RunFolderError(
                    f"{folder} is in use by another training process (pid {holder}); wait for it to end or stop it, "
                    f"or choose another folder (--output-dir)"
                ) from None
            if self._holds_the_name():
                break
            os.close(self.fd)
            self.fd = None
        else:  # pragma: no cover - a folder whose lock file is replaced a hundred times in a row
            raise RunFolderError(f"{folder}: could not take the lock {self.path}; try again")
        status = os.fstat(self.fd)
        why = (
            "it is not a plain file"
            if not stat.S_ISREG(status.st_mode)
            else "it has another name too, a hard link"
            if status.st_nlink != 1
            else None
            if _LOCK_TEXT.match(os.pread(self.fd, 64, 0).decode(errors="replace"))
            else "it holds other text"
        )
        if why is not None:
            os.close(self.fd)
            self.fd = None
            raise self._not_ours(why)
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def _open(self) -> None:
        file = next((p for p in (self.folder, *self.folder.parents) if p.exists() and not p.is_dir()), None)
        if file is not None:
            where = "" if file == self.folder else f" (in {self.folder})"
            raise RunFolderError(
                f"output_dir: {file} is a file, not a folder{where}; choose a folder for the run (output_dir in "
                f"the config, or --output-dir)"
            )
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            mode = os.lstat(self.path).st_mode if os.path.lexists(self.path) else stat.S_IFREG
            if not stat.S_ISREG(mode):  # never opened: a link, a folder, a pipe or a device
                raise self._not_ours("it is a link" if stat.S_ISLNK(mode) else "it is not a plain file")
            # O_NOFOLLOW: a link put at the name since is not followed either
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR):
                raise self._not_ours("it is a link" if exc.errno == errno.ELOOP else "it is not a plain file") from None
            raise RunFolderError(
                f"output_dir: cannot write in {self.folder} ({exc.strerror}); choose a writable folder "
                f"(output_dir in the config, or --output-dir)"
            ) from None

    def _not_ours(self, why: str) -> RunFolderError:
        """The refusal of what is at the lock's name and is no lock of this program's (``why``)."""
        return RunFolderError(
            f"{self.path} is not a lock of vlmrm-fast's ({why}), and a run locks its folder with that name; nothing "
            f"was changed. Move it away, or choose another folder (--output-dir)"
        )

    def _holds_the_name(self) -> bool:
        """True when the lock file's name still leads to the file this process opened (and locked)."""
        assert self.fd is not None
        try:
            return os.stat(self.path).st_ino == os.fstat(self.fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            if self._holds_the_name():
                self.path.unlink(missing_ok=True)  # while locked: see the class's docstring
        except OSError:
            pass  # a folder that turned read-only keeps its lock file; the next run takes it over
        os.close(self.fd)  # closing drops the flock
        self.fd = None
        if self.created and self.folder.is_dir() and not any(self.folder.iterdir()):
            self.folder.rmdir()


class RunFolder:
    def __init__(self, path: str | pathlib.Path):
        self.path = pathlib.Path(path)

    def lock(self) -> RunLock:
        """The folder's lock (:class:`RunLock`), taken once the folder is one a run may hold: never the filesystem's
        root or the home folder itself, which hold much more than a run (a RunFolderError)."""
        where = self.path.resolve()
        home = pathlib.Path.home().resolve()
        if where == where.parent or where == home:
            what = "the filesystem's root" if where == where.parent else f"your home folder itself ({home})"
            raise RunFolderError(
                f"output_dir: {self.path} is {what}, which holds much more than a run; give the run a folder of its "
                f"own (output_dir in the config, or --output-dir), e.g. {home / 'runs' / 'NAME'}"
            )
        return RunLock(self.path)

    @property
    def checkpoint_dir(self) -> pathlib.Path:
        return self.path / "checkpoints"

    def check_writable(self) -> None:
        """A RunFolderError, before anything is loaded, when the checkpoint folder is there but cannot be
        written (read-only, another owner): every checkpoint, and ``--resume``'s setting aside, writes there."""
        folder = self.checkpoint_dir
        if not folder.is_dir():
            return  # made by the first save, in the run folder that the lock showed writable
        probe = folder / f".write_probe.{os.getpid()}"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            probe.unlink()
        except OSError as exc:
            raise RunFolderError(
                f"{folder} cannot be written ({exc.strerror}): the run saves its checkpoints there; make it writable "
                f"(a read-only mount, or chmod u+w), or choose another folder (--output-dir)"
            ) from None

    def check_layout(self, algorithm: str | None = None) -> None:
        """A RunFolderError, before anything is built or changed, where the run could not write its files: a
        link or a file where it keeps a folder (``checkpoints/``, ``videos/``, its TensorBoard folder: a run
        writes and deletes only inside its own folder, and follows no link out of it), or a folder where it
        writes a file (``config.yaml``, ``run_files.json``, ...)."""
        tensorboard = _tensorboard_dir(algorithm)
        for relative in (*_RUN_FOLDERS, *([tensorboard] if tensorboard else [])):
            path = self.path / relative
            if path.is_symlink():
                raise RunFolderError(
                    f"{path} is a link (to {os.readlink(path)}), where the run keeps its {relative}/ folder: a run "
                    f"writes and deletes files only inside its own folder, and follows no link out of it. Nothing "
                    f"was changed. Put a folder there (move the files back), or give the run a folder on that disk "
                    f"(--output-dir)"
                )
            if path.exists() and not path.is_dir():
                raise RunFolderError(
                    f"{path} is a file, where the run keeps its {relative}/ folder; nothing was changed. Move it away, "
                    f"or choose another folder (--output-dir)"
                )
        for name in _RUN_FILES:
            path = self.path / name
            if path.is_dir() and not path.is_symlink():
                raise RunFolderError(
                    f"{path} is a folder, where the run writes its file {name}; nothing was changed. Move it away, "
                    f"or choose another folder (--output-dir)"
                )

    def inventory(self, algorithm: str | None = None, given_config: pathlib.Path | None = None) -> Inventory:
        """Every file in the folder, sorted by what the run may do with it (see :class:`Inventory`); a record that
        names anything but a file of the folder is refused (a RecordError). ``algorithm``: the run's (its
        TensorBoard folder is where it logs); ``given_config``: the config file the run was started with, never
        deleted or written."""
        files = RunFiles(self.path)
        given = _relative_file(self.path, given_config)
        owned = [relative for relative in files.owned() if relative != given]
        scan = checkpoints.scan(self.checkpoint_dir)
        for checkpoint in scan.complete:
            whole = [checkpoint.model, checkpoint.manifest_path]
            if checkpoint.reward_state is not None:
                whole.append(checkpoint.reward_state)
            if checkpoint.replay_buffer is not None and checkpoint.buffer_problem is None:
                whole.append(checkpoint.replay_buffer)
            owned += [self._relative(p) for p in whole]
        owned += [self._relative(p) for p in scan.incomplete]
        if files.exists() and files.entries():
            owned.append(RECORD)
        aside = [d for d in scan.damaged if d.files]
        for checkpoint in scan.complete:
            if checkpoint.replay_buffer is not None and checkpoint.buffer_problem is not None:
                aside.append(checkpoints.Damaged([checkpoint.replay_buffer], checkpoint.buffer_problem))
        set_aside = {self._relative(p) for d in aside for p in d.files}
        taken = set(owned) | set_aside
        every = _files_under(self.path)
        in_the_way = [
            relative
            for relative in every
            if relative not in taken and relative != given and _where_the_run_writes(relative, algorithm)
        ]
        kept = [relative for relative in every if relative not in taken and relative not in in_the_way]
        return Inventory(self.path, sorted(set(owned)), len(scan.complete), aside, in_the_way, kept)

    def _relative(self, path: pathlib.Path) -> str:
        return path.relative_to(self.path).as_posix()

    def check_unused(
        self, *, overwrite: bool, algorithm: str | None = None, given_config: pathlib.Path | None = None
    ) -> Inventory:
        """For a fresh start: what ``--overwrite`` will delete (and set aside), or a RunFolderError that says
        what the folder holds: a run's files without ``overwrite``, or files where the run writes that no
        record shows a run wrote (refused with ``overwrite`` too: only the user may delete those)."""
        found = self.inventory(algorithm, given_config)
        if found.in_the_way:
            names = _some(found.in_the_way)
            if found.holds_a_run() and not overwrite:
                raise RunFolderError(
                    f"{self.path} already holds a run ({found.describe()}; and {names}, which no record shows the "
                    f"run wrote). Continue it with --resume, or choose another folder (--output-dir); to start "
                    f"over, move {names} away first (--overwrite deletes only files on the run's records)"
                )
            raise RunFolderError(
                f"{'--overwrite: ' if overwrite else ''}{self.path} holds {names} where the run writes, and no "
                f"record shows a run wrote {'it' if len(found.in_the_way) == 1 else 'them'} (changed since, or "
                f"written before runs kept records); nothing was changed. Move {'it' if len(found.in_the_way) == 1 else 'them'} "
                f"away (or delete {'it' if len(found.in_the_way) == 1 else 'them'} yourself), or choose another folder (--output-dir)"
            )
        if found.holds_a_run() and not overwrite and not found.owned:
            names = _some([self._relative(p) for d in found.aside for p in d.files])
            raise RunFolderError(
                f"{self.path} holds {names}, named as this program names its checkpoints but vouched for by no "
                f"manifest (not a run of vlmrm-fast's: checkpoints of your own, or of another tool's?); the run would "
                f"write its checkpoints beside them, so nothing was changed. Move them away, choose another folder "
                f"(--output-dir), or pass --overwrite, which moves them into {self.checkpoint_dir / checkpoints.DAMAGED_DIR} "
                f"and deletes nothing"
            )
        if found.holds_a_run() and not overwrite:
            raise RunFolderError(
                f"{self.path} already holds a run ({found.describe()}). Continue it with --resume, start over "
                f"with --overwrite (deletes those {found.count()}, each on the run's records, and nothing else), "
                f"or choose another folder (--output-dir)"
            )
        if overwrite:
            self._check_changeable(found)
        return found

    def _check_changeable(self, found: Inventory) -> None:
        """A RunFolderError, before anything is deleted, when a folder that ``--overwrite`` changes cannot be
        changed (its permissions, a read-only disk): one holding a file it deletes, or above one (removed when
        left empty), or where it sets checkpoint files aside. ``--overwrite`` would otherwise stop halfway."""
        folders = set()
        for relative in found.owned:
            folder = (self.path / relative).parent
            while folder != self.path:
                folders.add(folder)
                folder = folder.parent
        if found.owned or found.aside:
            folders.add(self.path)
        if found.aside:
            folders |= {self.checkpoint_dir, self.checkpoint_dir / checkpoints.DAMAGED_DIR}
        for folder in sorted(folders):
            if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
                raise RunFolderError(
                    f"--overwrite: {folder} cannot be changed (its permissions, or a read-only disk), and the "
                    f"previous run's files there would stay while others were deleted; nothing was changed. Make it "
                    f"writable (chmod u+w {folder}), or choose another folder (--output-dir)"
                )

    def clear(self, algorithm: str | None, given_config: pathlib.Path | None) -> list[str]:
        """Deletes the previous run's files (as :meth:`inventory` finds them now: each on a record), after
        listing them, and moves checkpoint files no manifest vouches for into ``checkpoints/damaged/``; returns
        the lines that say so. Never touches another file, nor the config file given. Everything that can be
        checked (the records, the files in the way, the folders it changes) is checked before the first deletion:
        a refusal (exit 2) has changed nothing."""
        found = self.check_unused(overwrite=True, algorithm=algorithm, given_config=given_config)
        lines = []
        if found.owned:
            listed = "\n".join(f"  {relative}" for relative in found.owned)
            lines.append(
                f"--overwrite: deleting the previous run's {len(found.owned)} files in {self.path}, each on its "
                f"records (run_files.json, the checkpoints' manifests):\n{listed}"
            )
        # Manifests first: a kill in between leaves model files that no manifest names, set aside next time.
        order = sorted(found.owned, key=lambda r: (r == RECORD, not _is_manifest(r), r))
        for relative in order:
            (self.path / relative).unlink(missing_ok=True)
        for damage in found.aside:
            moved = checkpoints.set_aside(self.checkpoint_dir, damage.files)
            lines.append(
                f"--overwrite: moved {', '.join(p.name for p in moved)} into {self.checkpoint_dir / checkpoints.DAMAGED_DIR} "
                f"({damage.why}; not deleted: no manifest vouches for it)"
            )
        _remove_empty_folders(self.path, {str(pathlib.PurePosixPath(r).parent) for r in found.owned})
        given = _relative_file(self.path, given_config)
        others = [relative for relative in found.kept if relative != given]
        if others:
            lines.append(
                f"--overwrite: kept {_some(others, 8)} in {self.path}: no record shows a run wrote "
                f"{'it' if len(others) == 1 else 'them'}"
            )
        if given in found.kept:
            lines.append(f"--overwrite: kept {given}, the config file given (a run never deletes or rewrites it)")
        return lines

    def finished_model(self, identity: dict[str, Any]) -> tuple[int, str] | None:
        """(steps, what vouches for it) of the run's final model when ``final_model.zip`` is there as the run wrote
        it and of this run identity: its sha256 on the run's record, or, in a folder without one (a run from
        before records), the sha256 its final checkpoint's manifest holds for the model it copies; else None."""
        files = RunFiles(self.path)
        if files.exists():
            entry = files.entry(FINAL_MODEL)
            if entry is None or not isinstance(entry.get("steps"), int) or not files.vouches(FINAL_MODEL, entry):
                return None
            saved = upgraded_identity(entry.get("identity") or {})
            return (
                (entry["steps"], f"its sha256 is on the run's record, {RECORD}")
                if not identity_differences(saved, plain(identity))
                else None
            )
        newest = checkpoints.scan(self.checkpoint_dir).newest()
        if newest is None or not self._final_model_copies(newest) or not _same_run(newest, plain(identity)):
            return None
        return newest.steps, f"its sha256 is the one {newest.manifest_path.name} holds for {newest.name}"

    def check_resumable(self, algorithm: str | None, given_config: pathlib.Path | None) -> list[str]:
        """For ``--resume``: the files where the resumed run writes that no record vouches for. A folder
        without a record (a run from before records) gets them adopted as the run's (returned, recorded
        once the checkpoint has loaded); with a record they are refused (a RunFolderError): the run would
        write over what it did not write."""
        found = self.inventory(algorithm, given_config)
        if not RunFiles(self.path).exists():
            return found.in_the_way
        tensorboard = _tensorboard_dir(algorithm)
        # The resumed run writes a new event file beside the old ones, never over one.
        blocking = [r for r in found.in_the_way if not (tensorboard and r.startswith(tensorboard + "/"))]
        if not blocking:
            return []
        names = _some(blocking)
        raise RunFolderError(
            f"--resume: {names} in {self.path} {'is' if len(blocking) == 1 else 'are'} where the run writes, and "
            f"not as the run wrote {'it' if len(blocking) == 1 else 'them'} (no sha256 on its record, {RECORD}, "
            f"matches); nothing was changed. Move {'it' if len(blocking) == 1 else 'them'} away, then resume"
        )

    def holds_checkpoints(self) -> bool:
        """Whether a checkpoint, whole or damaged, is in the folder (files a kill cut short do not count)."""
        scan = checkpoints.scan(self.checkpoint_dir)
        return bool(scan.complete or scan.damaged)

    def resume_point(
        self, identity: dict[str, Any], *, needs_replay_buffer: bool, allow_empty_replay_buffer: bool
    ) -> ResumePoint:
        """The newest intact checkpoint of this run (checksums compared), preferring, for an off-policy run,
        the newest whose replay buffer is intact too; or a RunFolderError, with nothing changed, when there is
        none, when it belongs to another config, or when the off-policy run would go on with an empty buffer
        without ``allow_empty_replay_buffer``. A checkpoint whose model is damaged is intact still when the
        run's final model is its byte copy (the manifest's sha256): the final model restores it. Changes
        nothing: :meth:`ResumePoint.apply` does."""
        identity = plain(identity)
        scan = self._with_restorable(checkpoints.scan(self.checkpoint_dir))
        damaged = list(scan.damaged)
        intact: checkpoints.Checkpoint | None = None  # the newest whole model
        with_buffer: checkpoints.Checkpoint | None = None  # the newest whole model with its whole replay buffer
        bad_buffers: dict[str, checkpoints.Damaged] = {}  # checkpoint name -> its damaged replay buffer
        restorable: dict[str, checkpoints.Damaged] = {}  # checkpoint name -> its damaged model, restorable
        for checkpoint in reversed(scan.complete):
            if intact is not None and (
                not needs_replay_buffer or checkpoint.replay_buffer is None or not _same_run(checkpoint, identity)
            ):
                continue  # older than an intact model, and no buffer of this run to offer: not read
            model_problem, buffer_problem = checkpoints.verify(checkpoint)
            if model_problem:
                if not self._final_model_copies(checkpoint):
                    damaged.append(checkpoints.Damaged(checkpoint.files(), model_problem))
                    continue
                restorable[checkpoint.name] = checkpoints.Damaged([checkpoint.model], model_problem)
            if buffer_problem and checkpoint.replay_buffer is not None:
                bad_buffers[checkpoint.name] = checkpoints.Damaged([checkpoint.replay_buffer], buffer_problem)
                checkpoint.replay_buffer = None
            intact = intact or checkpoint
            if not needs_replay_buffer or checkpoint.replay_buffer is not None:
                with_buffer = checkpoint
                break
        if intact is None:
            raise self._nothing_intact(scan, damaged)
        if not _same_run(intact, identity):
            raise self._mismatch(f"checkpoint {intact.name}", _identity_of(intact), identity)
        chosen = with_buffer or intact
        if needs_replay_buffer and with_buffer is None and not allow_empty_replay_buffer:
            found = f" (damaged: {'; '.join(d.describe() for d in damaged)})" if damaged else ""
            raise RunFolderError(
                f"checkpoint {intact.name}, the newest intact one{found}: {_buffer_lack(intact, bad_buffers)}, and "
                f"no older checkpoint kept its replay buffer, so the off-policy run would go on with an empty one. "
                f"Nothing was changed. Pass --allow-empty-replay-buffer to accept that"
            )
        # Intact models newer than the chosen checkpoint lack their buffer: set aside whole, so that the resumed
        # run never writes over them; a damaged buffer of the chosen one is set aside alone.
        for checkpoint in scan.complete[scan.complete.index(chosen) :]:
            bad = bad_buffers.get(checkpoint.name)
            if checkpoint is chosen:
                damaged += [bad] if bad else []
                damaged += [restorable[chosen.name]] if chosen.name in restorable else []
            elif not any(checkpoint.model in d.files for d in damaged):
                files = (bad.files if bad else []) + checkpoint.files()
                why = f"checkpoint {checkpoint.name}: {_buffer_lack(checkpoint, bad_buffers)}"
                damaged.append(checkpoints.Damaged(files, why))
        return ResumePoint(
            self.checkpoint_dir,
            chosen,
            replay_buffer=needs_replay_buffer and chosen.replay_buffer is not None,
            damaged=damaged,
            incomplete=scan.incomplete,
            restore_from=self.path / FINAL_MODEL if chosen.name in restorable else None,
        )

    def _with_restorable(self, scan: checkpoints.CheckpointScan) -> checkpoints.CheckpointScan:
        """``scan`` with the checkpoints whose model is missing or cut short, but whose manifest reads back and
        whose model the final model copies, among the complete ones (to restore) instead of the damaged."""
        final = self.path / FINAL_MODEL
        if not final.is_file() or not any(d.files for d in scan.damaged):
            return scan
        complete, damaged = list(scan.complete), []
        for damage in scan.damaged:
            manifest = next((p for p in damage.files if p.suffix == ".json" and p.parent == self.checkpoint_dir), None)
            checkpoint = checkpoints.read_checkpoint(manifest)[0] if manifest is not None else None
            if checkpoint is not None and self._final_model_copies(checkpoint):
                complete.append(checkpoint)
            else:
                damaged.append(damage)
        complete.sort(key=lambda c: (c.steps, c.manifest.get("saved_at", "")))
        return checkpoints.CheckpointScan(complete, scan.incomplete, damaged)

    def _final_model_copies(self, checkpoint: checkpoints.Checkpoint) -> bool:
        """Whether ``final_model.zip`` is a byte copy of the checkpoint's model (the sha256 its manifest holds)."""
        final = self.path / FINAL_MODEL
        expected = checkpoint.manifest["files"]["model"].get(checkpoints.HASH)
        try:
            return expected is not None and final.is_file() and checkpoints.file_sha256(final) == expected
        except OSError:
            return False

    def _nothing_intact(self, scan: checkpoints.CheckpointScan, damaged: list[checkpoints.Damaged]) -> RunFolderError:
        if not damaged:
            cut = (
                f" (only {', '.join(p.name for p in scan.incomplete)}, which a kill cut short)"
                if scan.incomplete
                else ""
            )
            return RunFolderError(
                f"--resume: {self.checkpoint_dir} holds no checkpoint to resume from{cut}; nothing was changed. "
                f"Start the run without --resume (with --overwrite where the folder holds its files)"
            )
        return RunFolderError(
            f"--resume: no intact checkpoint in {self.checkpoint_dir}: "
            f"{'; '.join(d.describe() for d in damaged)}. Nothing was changed. Copy intact files back, start over "
            f"with --overwrite (deletes them), or choose another folder (--output-dir)"
        )

    def _mismatch(self, what: str, saved: dict[str, Any], current: dict[str, Any]) -> RunFolderError:
        changes = identity_differences(saved, current) or ["the saved run identity is unreadable"]
        return RunFolderError(
            f"{what} belongs to a run with another config ({'; '.join(changes)}). Set "
            f"{'it' if len(changes) == 1 else 'them'} back to resume (the run's config: {self.path / CONFIG_FILE}), or "
            f"start a new run elsewhere (--output-dir) or over it (--overwrite)"
        )


def _is_manifest(relative: str) -> bool:
    return relative.startswith("checkpoints/") and relative.endswith(".json") and relative.count("/") == 1


def _tensorboard_dir(algorithm: str | None) -> str | None:
    """The folder a run of ``algorithm`` logs into (train.py's logger), relative to the run folder."""
    return f"tensorboard/{algorithm}_1" if algorithm else None


def _where_the_run_writes(relative: str, algorithm: str | None) -> bool:
    tensorboard = _tensorboard_dir(algorithm)
    return (
        relative in _RUN_FILES
        or bool(_POLICY_VIDEO.match(relative))
        or (tensorboard is not None and relative.startswith(tensorboard + "/"))
    )


def _relative_file(folder: pathlib.Path, path: pathlib.Path | None) -> str | None:
    """``path`` relative to ``folder`` when it is a file inside it (links resolved), else None."""
    if path is None:
        return None
    inside = relative_to(folder.resolve(), pathlib.Path(path).resolve())
    return inside if inside is not None and not inside.startswith("..") else None


def _files_under(folder: pathlib.Path) -> list[str]:
    """Every file (and link) under ``folder`` but the lock, relative and sorted."""
    if not folder.is_dir():
        return []
    out = []
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = pathlib.Path(root) / name
            relative = path.relative_to(folder).as_posix()
            if relative != LOCK_FILE:
                out.append(relative)
    return sorted(out)


def _some(names: list[str], most: int = 5) -> str:
    """``a, b and 3 more``."""
    shown = ", ".join(names[:most])
    return f"{shown} and {len(names) - most} more" if len(names) > most else shown


def _remove_empty_folders(root: pathlib.Path, folders: set[str]) -> None:
    """Removes those of ``folders`` (relative), and the folders above them, that are left empty."""
    for relative in sorted(folders, key=lambda f: -f.count("/")):
        path = root / relative
        while path != root and path.is_dir() and not any(path.iterdir()):
            path.rmdir()
            path = path.parent
