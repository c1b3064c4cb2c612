"""What a run folder's records may name: files of that folder, and nothing else.

A run reads back two kinds of record: its record of the files it wrote (``run_files.json``,
:mod:`~vlmrm_fast.training.run_files`) and each checkpoint's manifest
(:mod:`~vlmrm_fast.training.checkpoints`). Both are data that anyone who can write in the folder may
have edited (a shared disk, a run folder copied from someone else; a manifest's own checksum is
recomputable), so neither is obeyed as a path: each name in them becomes a path here, or is refused.

- ``run_files.json`` names a file by a plain relative path inside the run folder: no absolute path, no
  ``..``, ``.`` or empty part, and no link on the way from the folder to the file (a link as the file
  itself is never the run's: the run writes files, and its record vouches for none that is a link).
- A checkpoint's manifest names its own checkpoint's files, those :func:`checkpoints.checkpoint_paths`
  and :func:`checkpoints.reward_state_path` give for its name (``model_N_steps.zip``,
  ``model_replay_buffer_N_steps.pkl`` and ``model_reward_state_N_steps.pt`` beside ``model_N_steps.json``), and no
  other, nor a file of any other kind (:data:`CHECKPOINT_ROLES`).
- An ``appended`` entry of ``run_files.json`` (a file another library appends to as the run goes) names
  only a TensorBoard event file of the run, ``tensorboard/NAME/events.out.tfevents.*``.

Anything else is a :class:`RecordError`: one line naming the record and the entry, raised before the
name is used, so that nothing is touched. The run's own writers hold to the same rule
(:func:`file_to_record`): what they put on a record is always what its reader accepts.
"""

from __future__ import annotations

import os
import pathlib
import re
import stat
from typing import Any

from vlmrm_fast.failures import ExpectedFailure

#: The TensorBoard event files a run writes (``tensorboard/SAC_1/events.out.tfevents.<time>.<host>.<pid>.<n>``):
#: the only files an ``appended`` entry may name.
TENSORBOARD_EVENTS = re.compile(r"^tensorboard/[^/]+/events\.out\.tfevents\.[^/]+$")

#: The files a checkpoint's manifest names, by their role in it: the only roles a manifest holds.
CHECKPOINT_ROLES = ("model", "replay_buffer", "reward_state")

_EDITED = "edited by hand or forged (anyone who can write in the folder can)"
_MANIFEST_REFUSED = (
    f"Refused; nothing was touched. The manifest was {_EDITED}: check it; moved away, its checkpoint's files count "
    f"as files no manifest vouches for (set aside into checkpoints/damaged/, never deleted)"
)


class RecordError(ExpectedFailure):
    """A run folder's record names something that is not a file of that folder, or does not read back as a
    record this version reads: refused, with nothing touched."""


def file_in_run(folder: pathlib.Path, name: Any, record: pathlib.Path) -> pathlib.Path:
    """The path of the file that ``record`` (``run_files.json``) names ``name``, inside ``folder``; a
    :class:`RecordError` when ``name`` is not a plain relative path inside the folder with no link on the way."""
    why = _not_in_folder(folder, name)
    if why is not None:
        raise RecordError(
            f"{record} names {name!r}, which is not a file of the run folder ({why}): a record names only files "
            f"of its own folder, by plain relative paths. Refused; nothing was touched. The record was {_EDITED}: "
            f"check it and remove that entry (or move {record.name} away), then run again"
        )
    return folder / name


def file_to_record(folder: pathlib.Path, name: str, record: pathlib.Path, *, appended: bool = False) -> pathlib.Path:
    """The path of the file a writer of ``record`` (``run_files.json``) is about to put on it as ``name``
    (``appended``: as a file another library appends to); a :class:`RecordError` where its reader would refuse
    that entry, raised before anything is written."""
    why = _not_in_folder(folder, name)
    if why is None and appended and not TENSORBOARD_EVENTS.match(name):
        why = "only the run's TensorBoard event files, tensorboard/NAME/events.out.tfevents.*, are recorded as appended to"
    if why is not None:
        raise RecordError(
            f"{record}: {name!r} is not put on the record ({why}): a record names only files of its own folder, "
            f"by plain relative paths; nothing was written"
        )
    return folder / name


def checkpoint_roles(manifest: pathlib.Path, entries: dict[str, Any]) -> None:
    """A :class:`RecordError` when ``manifest``'s file entries hold a role no checkpoint has (a checkpoint is a
    model and its replay buffer, :data:`CHECKPOINT_ROLES`): such a manifest is not one this program wrote."""
    for role, entry in entries.items():
        if role not in CHECKPOINT_ROLES:
            name = entry.get("name") if isinstance(entry, dict) else entry
            raise RecordError(
                f"{manifest} names {name!r} as its {role!r}, a file no checkpoint has (a checkpoint's manifest names "
                f"its model, its replay buffer and its reward model's state only). {_MANIFEST_REFUSED}"
            )


def own_checkpoint_file(manifest: pathlib.Path, role: str, entry: Any, own: pathlib.Path) -> pathlib.Path:
    """``own``, the path of the checkpoint file that ``manifest``'s ``entry`` (``{"name": ..., "bytes": ...,
    "sha256": ...}``) names as its ``role`` ("model", "replay_buffer", "reward_state"); a :class:`RecordError` when the entry
    names anything but that file's own name."""
    name = entry.get("name") if isinstance(entry, dict) else entry
    if not isinstance(entry, dict) or name != own.name:
        raise RecordError(
            f"{manifest} names {name!r} as its {role.replace('_', ' ')}, and a checkpoint's manifest names only its "
            f"own files ({own.name} for this one). {_MANIFEST_REFUSED}"
        )
    return own


def bad_entry(record: pathlib.Path, name: str, what: str) -> RecordError:
    """The refusal of an entry of ``record`` whose content is not what this program writes (``what``)."""
    return RecordError(
        f"{record}: the entry {name!r} {what}. Refused; nothing was touched. The record was {_EDITED}: check it "
        f"and remove that entry (or move {record.name} away), then run again"
    )


def bad_record(record: pathlib.Path, what: str, fix: str) -> RecordError:
    """The refusal of a whole record (``what`` is wrong with it; ``fix`` says what to do)."""
    return RecordError(f"{record} {what}. Refused; nothing was touched. {fix}")


def names_a_file_in(folder: pathlib.Path, name: Any) -> bool:
    """Whether a record may name ``name`` as a file of ``folder`` (the rule :func:`file_in_run` enforces)."""
    return _not_in_folder(folder, name) is None


def _not_in_folder(folder: pathlib.Path, name: Any) -> str | None:
    """Why ``name`` does not name a file inside ``folder`` by a plain relative path with no link on the way;
    None when it does."""
    if not isinstance(name, str) or not name:
        return "not a path"
    if "\0" in name:
        return "a NUL byte in it"
    if name.startswith("/"):
        return "an absolute path"
    parts = name.split("/")
    if ".." in parts:
        return "'..' leads out of it"
    if any(part in ("", ".") for part in parts):
        return "not a plain relative path"
    here = folder
    for part in parts[:-1]:
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except OSError:
            return None  # nothing further is there: the name leads nowhere, and out of nowhere
        if stat.S_ISLNK(mode):
            return f"{here.relative_to(folder).as_posix()} on the way is a link"
    return None
