"""A run folder's records are data, never orders: each name in them is a file of that folder, or refused.

A run reads back its record of the files it wrote (``run_files.json``) and its checkpoints' manifests,
and both can be forged by anyone who can write in the folder (a manifest's checksum is recomputable).
Each test forges one, with a file outside the run folder that the forged entry names, and starts the
run as a user would (``train CONFIG --overwrite``, ``--resume``, or a save that prunes): the start is
refused in one line naming the entry, and everything under the test's folder, inside the run folder
and out (each file by its sha256, each folder, each link and where it points), is compared before
and after: nothing was touched. The run folders are written by the run's own writers (``RunFiles``,
``checkpoints.save_checkpoint``) without training, and every refusal comes before the envs are built
(building them fails these tests): each test takes a fraction of a second. One test trains (a
manifest forged while the run goes on).
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import pathlib
import re
import shutil

import pytest
import yaml

from vlmrm_fast.cli import main as cli_main
from vlmrm_fast.training import checkpoints
from vlmrm_fast.training import train as train_module
from vlmrm_fast.training.config import load_config, resolved, run_identity
from vlmrm_fast.training.records import RecordError
from vlmrm_fast.training.run_files import RunFiles
from vlmrm_fast.training.run_folder import LOCK_FILE, RunFolder, RunFolderError, plain

CONFIG = {
    "reward": {"model": "vlmrm-tiny", "device": "cpu"},
    "env": {"task": "humanoid-kneeling", "n_envs": 2, "episode_length": 10, "render_size": 32},
    "rl": {"algorithm": "SAC", "total_timesteps": 40, "device": "cpu", "kwargs": {"buffer_size": 100}},
    "logging": {"checkpoint_every": 20, "video_every": 0},
}
PRECIOUS = b"a file of the user's, outside the run folder\n"
_copyfileobj = shutil.copyfileobj


class _Model:
    """What save_checkpoint asks of an off-policy SB3 model (a replay buffer beside the model)."""

    replay_buffer = object()

    def __init__(self, steps: int):
        self.num_timesteps = steps

    def save(self, f):
        f.write(b"model %d" % self.num_timesteps)

    def save_replay_buffer(self, f):
        f.write(b"buffer %d" % self.num_timesteps)


def _tree(root: pathlib.Path) -> dict[str, str]:
    """Everything under ``root`` by its path relative to it: each file's sha256, each folder, each link and where
    it points (a folder removed, or a link replaced by what it pointed to, is a change too)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = pathlib.Path(folder, name)
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[relative] = f"link to {os.readlink(path)}"
            elif path.is_dir():
                out[relative] = "folder"
            else:
                out[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


_make_env = train_module.make_env


@pytest.fixture(autouse=True)
def _no_envs(monkeypatch):
    """A start that builds its envs fails the test: every refusal here comes before (the test that trains puts
    ``_make_env`` back)."""

    def no_envs(cfg, plan=None):
        raise AssertionError("the envs were built before the refusal")

    monkeypatch.setattr(train_module, "make_env", no_envs)


@pytest.fixture
def run(tmp_path) -> pathlib.Path:
    """``tmp_path/a/b/run``: a run's config.yaml on its record and two checkpoints of the config's run identity
    (model, replay buffer and manifest each), as a run writes them, the newest at rl.total_timesteps;
    ``tmp_path/run.yaml`` the config given, ``tmp_path/x`` a file of the user's outside the run folder."""
    folder = tmp_path / "a" / "b" / "run"
    cfg = copy.deepcopy(CONFIG)
    cfg["output_dir"] = str(folder)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    identity = plain(run_identity(resolved(load_config(tmp_path / "run.yaml"))))
    RunFiles(folder).write_text("config.yaml", "seed: 0\n")
    for steps in (20, 40):
        checkpoints.save_checkpoint(
            _Model(steps),
            folder / "checkpoints",
            reason="periodic",
            extra={"identity": identity},
            keep_replay_buffers=2,
        )
    (tmp_path / "x").write_bytes(PRECIOUS)
    return folder


def _edit_record(run: pathlib.Path, edit) -> None:
    record = run / "run_files.json"
    data = json.loads(record.read_text())
    edit(data)
    record.write_text(json.dumps(data))


def _forge_manifest(run: pathlib.Path, steps: int, role: str, name: str, size: int | None = None) -> None:
    """Names ``name`` as the checkpoint's ``role`` file, with a checksum recomputed as a forger would."""
    manifest = run / "checkpoints" / f"model_{steps}_steps.json"
    data = json.loads(manifest.read_text())
    data["files"][role]["name"] = name
    if size is not None:
        data["files"][role]["bytes"] = size
    data["manifest_sha256"] = checkpoints._manifest_checksum(data)
    manifest.write_text(json.dumps(data))


def _refused(tmp_path: pathlib.Path, capfd, flags: list[str], *expected: str) -> None:
    """``train run.yaml FLAGS`` exits 2 with one line holding ``expected``, every file as it was."""
    before = _tree(tmp_path)
    assert cli_main(["train", str(tmp_path / "run.yaml"), *flags]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for part in expected:
        assert part in err, err
    assert "nothing was touched" in err, err
    assert _tree(tmp_path) == before
    assert (tmp_path / "x").read_bytes() == PRECIOUS


SHA_OF_X = hashlib.sha256(PRECIOUS).hexdigest()


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("../../../x", "('..' leads out of it)"),
        ("../../../run.yaml", "('..' leads out of it)"),  # the config file given, named from the run folder
        ("linkdir/x", "(linkdir on the way is a link)"),
        ("checkpoints/../../../../x", "('..' leads out of it)"),
        ("./config.yaml", "(not a plain relative path)"),
    ],
)
@pytest.mark.parametrize("flags", [["--overwrite"], ["--resume"], []])
def test_a_record_naming_a_file_outside_the_run_folder_is_refused(run, tmp_path, capfd, entry, why, flags):
    (run / "linkdir").symlink_to(tmp_path)  # a folder link inside the run, pointing out of it
    digest = hashlib.sha256((tmp_path / entry.split("/")[-1]).read_bytes()).hexdigest() if "x" in entry else SHA_OF_X
    _edit_record(run, lambda data: data["files"].update({entry: {"sha256": [digest], "bytes": 1}}))
    _refused(tmp_path, capfd, flags, f"{run / 'run_files.json'} names {entry!r}, which is not a file of the run", why)


def test_an_absolute_path_in_the_record_is_refused_and_its_empty_folders_kept(run, tmp_path, capfd):
    victim = tmp_path / "deep" / "er" / "y"
    victim.parent.mkdir(parents=True)
    victim.write_bytes(PRECIOUS)
    _edit_record(run, lambda data: data["files"].update({str(victim): {"sha256": [SHA_OF_X]}}))
    _refused(tmp_path, capfd, ["--overwrite"], f"names {str(victim)!r}", "(an absolute path)")
    assert victim.read_bytes() == PRECIOUS


@pytest.mark.parametrize(
    ("entry", "content", "why"),
    [
        ("../../../x", {"appended": True}, "('..' leads out of it)"),
        ("notes.txt", {"appended": True}, "is marked appended, which only the run's TensorBoard event files are"),
        (
            "tensorboard/SAC_1/events.out.tfevents.1.host.1.0",
            {"appended": True},
            "is marked appended without the size and sha256 it had",
        ),
        ("config.yaml", {"sha256": 5}, "has sha256 5, not a list of sha256 hex digests"),
        ("config.yaml", {"sha256": ["abc"]}, "has sha256 ['abc'], not a list of sha256 hex digests"),
        ("config.yaml", [1, 2], "is [1, 2], not a mapping"),
        ("config.yaml", {"bytes": 3}, "has no sha256, and each file of the run's is recorded with its sha256"),
    ],
)
def test_a_record_entry_this_program_never_writes_is_refused(run, tmp_path, capfd, entry, content, why):
    """An appended entry (a file another library appends to) needs no sha256 of the whole file, so it names
    only the run's TensorBoard event files, with the size and sha256 they had when last recorded."""
    (run / "notes.txt").write_text("mine\n")
    _edit_record(run, lambda data: data["files"].update({entry: content}))
    _refused(tmp_path, capfd, ["--overwrite"], repr(entry), why)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"format": 99, "files": {}}', "is of format 99, and this version of vlmrm-fast reads formats 1 and 2"),
        ('{"format": 2, "fil', "does not read back (JSONDecodeError"),
        ('{"format": 2}', "holds no mapping of files"),
    ],
)
@pytest.mark.parametrize("flags", [["--overwrite"], ["--resume"]])
def test_a_record_this_version_does_not_read_is_refused_naming_why(run, tmp_path, capfd, text, why, flags):
    """Named as the record that it is (never as a file "not as the run wrote it"), before the envs are built."""
    (run / "run_files.json").write_text(text)
    _refused(tmp_path, capfd, flags, f"{run / 'run_files.json'} {why}")


@pytest.mark.parametrize(
    ("steps", "role", "name", "flags"),
    [
        (20, "replay_buffer", "../../../../x", ["--resume"]),  # the newest's buffer pruned at the next save
        (20, "model", "../../../../x", ["--overwrite"]),
        (40, "model", "../../../../x", ["--resume"]),  # its hash differs: moved into checkpoints/damaged/
        (40, "model", "ABSOLUTE", ["--resume"]),
        (40, "model", "model_20_steps.zip", ["--overwrite"]),  # another checkpoint's file
        (40, "replay_buffer", "README.txt", ["--overwrite"]),  # a file of the user's in checkpoints/
    ],
)
def test_a_manifest_naming_anything_but_its_own_files_is_refused(run, tmp_path, capfd, steps, role, name, flags):
    name = str(tmp_path / "x") if name == "ABSOLUTE" else name
    (run / "checkpoints" / "README.txt").write_text("the good one is model_20_steps.zip\n")
    _forge_manifest(run, steps, role, name, size=len(PRECIOUS))
    own = "model_replay_buffer" if role == "replay_buffer" else "model"
    _refused(
        tmp_path,
        capfd,
        flags,
        f"{run / 'checkpoints' / f'model_{steps}_steps.json'} names {name!r} as its {role.replace('_', ' ')}",
        f"names only its own files ({own}_{steps}_steps.",
    )


def _reward_state(steps: int):
    """A reward model's learned state, as save_checkpoint's ``reward_state`` writes it."""
    return lambda f: f.write(b"learned %d" % steps)


@pytest.fixture
def learned_run(run) -> pathlib.Path:
    """``run`` with a checkpoint at 60 steps that holds a reward model's learned state (a learned preference
    reward's), as a run writes it."""
    checkpoints.save_checkpoint(
        _Model(60), run / "checkpoints", reason="periodic", keep_replay_buffers=3, reward_state=_reward_state(60)
    )
    assert (run / "checkpoints" / "model_reward_state_60_steps.pt").read_bytes() == b"learned 60"
    return run


@pytest.mark.parametrize(
    ("name", "flags"),
    [
        ("../../../../x", ["--resume"]),
        ("../../../../x", ["--overwrite"]),
        ("ABSOLUTE", ["--resume"]),
        ("model_replay_buffer_60_steps.pkl", ["--resume"]),  # another file of its own checkpoint
        ("model_reward_state_40_steps.pt", ["--overwrite"]),  # another checkpoint's name
        ("README.txt", ["--resume"]),  # a file of the user's in checkpoints/
    ],
)
def test_a_manifest_naming_anything_but_its_own_reward_state_is_refused(learned_run, tmp_path, capfd, name, flags):
    """The reward model's learned state is a file of its checkpoint like the model: a manifest that names another
    file as it (outside the folder, absolute, another file's) is refused before anything is read or touched."""
    name = str(tmp_path / "x") if name == "ABSOLUTE" else name
    (learned_run / "checkpoints" / "README.txt").write_text("the good one is model_20_steps.zip\n")
    _forge_manifest(learned_run, 60, "reward_state", name, size=len(PRECIOUS))
    _refused(
        tmp_path,
        capfd,
        flags,
        f"{learned_run / 'checkpoints' / 'model_60_steps.json'} names {name!r} as its reward state",
        "names only its own files (model_reward_state_60_steps.pt for this one)",
    )


def test_a_forged_reward_state_entry_is_refused_by_a_save_that_would_prune(learned_run, tmp_path):
    """A save that prunes (``keep_checkpoints: 1``) reads every manifest first: a reward state entry naming a file
    outside the folder makes it refuse, and the file outside survives byte for byte."""
    _forge_manifest(learned_run, 60, "reward_state", "../../../../x", size=len(PRECIOUS))
    before = _tree(tmp_path)
    with pytest.raises(RecordError, match="names '../../../../x' as its reward state"):
        checkpoints.save_checkpoint(
            _Model(80),
            learned_run / "checkpoints",
            reason="periodic",
            keep_checkpoints=1,
            reward_state=_reward_state(80),
        )
    after = _tree(tmp_path)
    assert {name: after[name] for name in before} == before
    assert (tmp_path / "x").read_bytes() == PRECIOUS


def test_a_reward_state_is_part_of_its_checkpoint(learned_run):
    """Scanned, verified and pruned with its checkpoint: missing or altered, the checkpoint is damaged (set aside,
    never deleted); no manifest naming it, it is a file no manifest vouches for."""
    folder = learned_run / "checkpoints"
    checkpoints.save_checkpoint(
        _Model(80), folder, reason="periodic", keep_checkpoints=1, reward_state=_reward_state(80)
    )
    assert not (folder / "model_reward_state_60_steps.pt").exists()  # pruned with its checkpoint
    state = folder / "model_reward_state_80_steps.pt"
    newest = checkpoints.scan(folder).newest()
    assert newest is not None and newest.steps == 80 and newest.reward_state == state and state in newest.files()
    assert checkpoints.verify(newest) == (None, None)
    state.write_bytes(b"learned 81")  # the same size, another content
    assert checkpoints.verify(newest)[0] == f"{state.name}: its sha256 differs from the manifest's"
    state.unlink()
    scan = checkpoints.scan(folder)
    assert 80 not in [c.steps for c in scan.complete]
    assert [d.why for d in scan.damaged] == [f"{state.name} is missing"]
    (folder / "model_reward_state_100_steps.pt").write_bytes(b"learned 100")
    assert "model_reward_state_100_steps.pt" in [p.name for d in checkpoints.scan(folder).damaged for p in d.files]


def test_a_forged_manifest_is_refused_by_a_save_that_would_prune(run, tmp_path):
    """``logging.keep_checkpoints: 1`` and ``keep_replay_buffers`` prune after each save: a manifest naming a
    file outside the folder makes the save's pruning refuse, and deletes nothing."""
    _forge_manifest(run, 20, "model", "../../../../x", size=len(PRECIOUS))
    _forge_manifest(run, 40, "replay_buffer", "../../../../x", size=len(PRECIOUS))
    before = _tree(tmp_path)
    with pytest.raises(RecordError, match="names '../../../../x' as its"):
        checkpoints.save_checkpoint(_Model(60), run / "checkpoints", reason="periodic", keep_checkpoints=1)
    after = _tree(tmp_path)
    assert {name: after[name] for name in before} == before  # all there; the new checkpoint beside them
    assert (tmp_path / "x").read_bytes() == PRECIOUS


@pytest.mark.parametrize("flags", [["--overwrite"], ["--resume"]])
def test_a_manifest_naming_a_file_of_a_kind_no_checkpoint_has_is_refused(run, tmp_path, capfd, flags):
    """A checkpoint is a model, a replay buffer and a learning reward model's state: a manifest naming another
    file (as its ``notes``) is not one this program wrote, whatever the name, and is refused as a whole."""
    manifest = run / "checkpoints" / "model_20_steps.json"
    data = json.loads(manifest.read_text())
    data["files"]["notes"] = {"name": "../../../../x", "bytes": len(PRECIOUS), "sha256": SHA_OF_X}
    data["manifest_sha256"] = checkpoints._manifest_checksum(data)
    manifest.write_text(json.dumps(data))
    _refused(
        tmp_path,
        capfd,
        flags,
        f"{manifest} names '../../../../x' as its 'notes', a file no checkpoint has (a checkpoint's manifest names its "
        "model, its replay buffer and its reward model's state only)",
    )


@pytest.mark.usefixtures("one_torch_thread")
def test_a_manifest_forged_while_the_run_goes_on_stops_it_deleting_nothing(tmp_path, capfd, monkeypatch):
    """A manifest forged while the run trains (``logging.keep_checkpoints: 1``): the pruning after the next save
    refuses it and deletes nothing, and the run stops with exit 1 (it changed its folder: never the exit 2 of a
    refusal) in one line that names the manifest and the command that continues once it is fixed."""
    monkeypatch.setattr(train_module, "make_env", _make_env)
    run = tmp_path / "a" / "b" / "run"
    cfg = copy.deepcopy(CONFIG)
    cfg.update(output_dir=str(run), logging={**CONFIG["logging"], "keep_checkpoints": 1, "tensorboard": False})
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "x").write_bytes(PRECIOUS)
    save = checkpoints.save_checkpoint

    def forged_before_the_second_save(model, folder, **kwargs):
        if model.num_timesteps == 40:
            _forge_manifest(run, 20, "model", "../../../../x", size=len(PRECIOUS))
        return save(model, folder, **kwargs)

    monkeypatch.setattr(checkpoints, "save_checkpoint", forged_before_the_second_save)
    assert cli_main(["train", str(tmp_path / "run.yaml")]) == 1
    err = capfd.readouterr().err.strip().splitlines()
    line = err[-1]
    manifest = run / "checkpoints" / "model_20_steps.json"
    assert line.startswith(f"vlmrm-fast train: {manifest} names '../../../../x' as its model"), err
    assert "Traceback" not in "\n".join(err) and "the run stopped at 40 steps" in line, line
    assert line.endswith(f"then run: vlmrm-fast train {tmp_path / 'run.yaml'} --resume"), line
    assert (tmp_path / "x").read_bytes() == PRECIOUS
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "model_20_steps.json",
        "model_20_steps.zip",
        "model_40_steps.json",
        "model_40_steps.zip",
        "model_replay_buffer_20_steps.pkl",
        "model_replay_buffer_40_steps.pkl",
    ]


# ------------------------------------------------------------------ what a record still vouches for
def test_an_appended_file_is_the_runs_while_it_begins_with_the_bytes_recorded(tmp_path):
    """A TensorBoard event file is recorded with its size and sha256 as it grows: appended to since (the run went
    on after its last record), it is still the run's; edited within what was recorded, it is the user's."""
    files = RunFiles(tmp_path)
    relative = "tensorboard/SAC_1/events.out.tfevents.1.host.1.0"
    event_file = tmp_path / relative
    event_file.parent.mkdir(parents=True)
    event_file.write_bytes(b"header")
    files.record_appended(relative)
    with open(event_file, "ab") as f:
        f.write(b" scalars")
    assert files.owned() == [relative]
    files.record_appended(relative)
    assert files.entry(relative) == {
        "appended": True,
        "bytes": 14,
        "sha256": hashlib.sha256(b"header scalars").hexdigest(),
    }
    event_file.write_bytes(b"HEADER scalars and more")  # the user's edit
    assert files.owned() == []


def test_an_edited_event_file_is_in_the_way_and_a_writer_records_only_what_a_reader_accepts(run, tmp_path):
    """The run's TensorBoard event file, recorded as it grows, is the run's (``--overwrite`` deletes it); edited
    within the bytes recorded, it is the user's, in the way of a new run. A writer of the record puts on it only
    what its reader accepts: no file but the run's event files as appended, no name outside the folder."""
    files = RunFiles(run)
    relative = "tensorboard/SAC_1/events.out.tfevents.1700000000.host.42.0"
    path = run / relative
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x18\x00brain.Event:2 header")
    files.record_appended(relative)
    with open(path, "ab") as f:
        f.write(b" scalars appended by the writer")
    files.record_appended(relative)
    assert relative in RunFolder(run).inventory("SAC").owned
    path.write_bytes(path.read_bytes().replace(b"scalars", b"SCALARS"))  # a user's edit
    found = RunFolder(run).inventory("SAC")
    assert relative not in found.owned and found.in_the_way == [relative]
    (run / "notes.txt").write_text("mine\n")
    before = _tree(tmp_path)
    with pytest.raises(RecordError, match=r"'notes.txt' .*only the run's TensorBoard event files"):
        files.record_appended("notes.txt")
    with pytest.raises(RecordError, match=r"'\.\./\.\./\.\./x' .*'\.\.' leads out of it"):
        files.record_appended("../../../x")
    with pytest.raises(RecordError, match=r"'\.\./\.\./\.\./x' .*'\.\.' leads out of it"):
        files.write_text("../../../x", "written over\n")
    assert _tree(tmp_path) == before


def test_a_format_1_record_still_reads_and_its_bare_appended_entries_vouch_for_nothing(tmp_path):
    """Records written before appended files carried their size and sha256 (format 1): read as before, but an
    appended entry that holds only its name vouches for nothing; the next write upgrades the record."""
    files = RunFiles(tmp_path)
    files.write_text("config.yaml", "seed: 0\n")
    relative = "tensorboard/SAC_1/events.out.tfevents.1.host.1.0"
    (tmp_path / relative).parent.mkdir(parents=True)
    (tmp_path / relative).write_bytes(b"events")
    _edit_record(tmp_path, lambda data: data.update(format=1) or data["files"].update({relative: {"appended": True}}))
    assert files.owned() == ["config.yaml"]
    files.write_text("learning_curves.csv", "step\n")
    data = json.loads((tmp_path / "run_files.json").read_text())
    assert data["format"] == 2 and sorted(data["files"]) == ["config.yaml", "learning_curves.csv"]


# ------------------------------------------------------------------ files a run never wrote
def _unchanged(tmp_path: pathlib.Path, capfd, flags: list[str], code: int, *expected: str) -> tuple[str, str]:
    """``train run.yaml FLAGS`` exits with ``code``, its output holding ``expected``, every file as it was;
    returns (stdout, stderr)."""
    before = _tree(tmp_path)
    assert cli_main(["train", str(tmp_path / "run.yaml"), *flags]) == code
    out, err = capfd.readouterr()
    for part in expected:
        assert part in out + err, out + err
    assert _tree(tmp_path) == before
    return out, err


@pytest.mark.parametrize("flags", [["--overwrite"], ["--resume"], []])
def test_another_tools_lock_file_is_never_taken_over(run, tmp_path, capfd, flags):
    """A ``.lock`` of another tool's in the run folder stays as it is, whatever the start does (refused here: a
    file where the run writes that no record vouches for); the run's own lock has a name of its own."""
    (run / ".lock").write_text("held by rsync-backup, pid 77\n")
    (run / "learning_curves.csv").write_text("mine\n")
    _unchanged(tmp_path, capfd, flags, 2, "learning_curves.csv")
    lock = RunFolder(run).lock()
    assert (run / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    lock.release()
    assert (run / ".lock").read_text() == "held by rsync-backup, pid 77\n"


@pytest.mark.parametrize(
    ("what", "why"),
    [
        ("notes", "it holds other text"),
        ("link", "it is a link"),  # to an empty file outside: a lock would write its pid there
        ("dangling link", "it is a link"),  # a lock would create the file outside
        ("hard link", "it has another name too, a hard link"),  # another name of an empty file outside
        ("folder", "it is not a plain file"),
    ],
)
def test_a_file_of_the_locks_name_that_is_no_lock_is_refused_and_kept(run, tmp_path, capfd, what, why):
    """The lock is opened without following a link: whatever is at its name that is not a lock of this program's
    is refused as it is, and nothing outside the folder is created or written."""
    lock = run / LOCK_FILE
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    if what == "notes":
        lock.write_text("my notes\n")
    elif what == "link":
        lock.symlink_to(empty)
    elif what == "dangling link":
        lock.symlink_to(tmp_path / "nowhere")
    elif what == "hard link":
        os.link(empty, lock)
    else:
        lock.mkdir()
    _, err = _unchanged(tmp_path, capfd, [], 2, f"{lock} is not a lock of vlmrm-fast's ({why})", "nothing was changed")
    assert len(err.strip().splitlines()) == 1, err


def test_only_this_programs_own_temporaries_count_as_cut_short_by_a_kill(run):
    """``.model_40_steps.zip.tmp`` is a save's temporary (removed by --resume, deleted by --overwrite); a hidden
    ``.notes.tmp`` of the user's in checkpoints/ is no temporary of a save: kept."""
    folder = run / "checkpoints"
    (folder / ".notes.tmp").write_text("mine\n")
    (folder / ".model_60_steps.zip.tmp").write_bytes(b"cut short")
    (folder / ".model_60_steps.zip.tmp.tmp").write_bytes(b"mine too")
    assert [p.name for p in checkpoints.scan(folder).incomplete] == [".model_60_steps.zip.tmp"]
    found = RunFolder(run).inventory("SAC")
    assert "checkpoints/.model_60_steps.zip.tmp" in found.owned
    assert {"checkpoints/.notes.tmp", "checkpoints/.model_60_steps.zip.tmp.tmp"} <= set(found.kept)


@pytest.mark.parametrize("where", ["videos", "checkpoints", "tensorboard", "tensorboard/SAC_1", "rollouts"])
@pytest.mark.parametrize("flags", [["--overwrite"], ["--resume"]])
def test_a_run_folder_linking_out_is_refused_before_anything_is_deleted(run, tmp_path, capfd, where, flags):
    """``videos/`` (or another folder the run writes in) moved to another disk and linked: the start refuses,
    before deleting anything, in one line that names the link; the files on the other disk are as they were."""
    files = RunFiles(run)
    recorded = f"{where}/events.out.tfevents.1.host.1.0" if where == "tensorboard/SAC_1" else f"{where}/notes.txt"
    if where == "videos":
        recorded = "videos/policy_000000020_steps.mp4"
    if where != "checkpoints":
        files.write_text(recorded, "a file of the run's\n")
    other_disk = tmp_path / "other_disk" / where.replace("/", "_")
    other_disk.parent.mkdir()
    (run / where).rename(other_disk) if (run / where).exists() else other_disk.mkdir()
    (run / where).parent.mkdir(parents=True, exist_ok=True)
    (run / where).symlink_to(other_disk)
    _, err = _unchanged(tmp_path, capfd, flags, 2, f"{run / where} is a link (to {other_disk}), where the run keeps")
    assert len(err.strip().splitlines()) == 1 and "Nothing was changed" in err, err


def test_overwrite_checks_every_folder_it_deletes_in_before_the_first_deletion(run, tmp_path, capfd, monkeypatch):
    """A folder holding the previous run's files that cannot be changed (its permissions, a read-only mount) is
    found before anything is deleted: --overwrite refuses with nothing changed, instead of stopping halfway (the
    checkpoints and config.yaml deleted, videos/ not)."""
    RunFiles(run).write_text("videos/policy_000000020_steps.mp4", "the previous run's video\n")
    videos = run / "videos"
    real_access, real_unlink = os.access, os.unlink

    def access(path, mode, **kwargs):
        return pathlib.Path(path) != videos and real_access(path, mode, **kwargs)

    def unlink(path, **kwargs):  # (the tests may run as root, whom permissions do not stop)
        if pathlib.Path(path).parent == videos:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        real_unlink(path, **kwargs)

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "unlink", unlink)
    expected = f"--overwrite: {videos} cannot be changed (its permissions, or a read-only disk)"
    _, err = _unchanged(tmp_path, capfd, ["--overwrite"], 2, expected, "nothing was changed")
    assert len(err.strip().splitlines()) == 1, err
    before = _tree(tmp_path)
    with pytest.raises(RunFolderError, match=re.escape(expected)):
        RunFolder(run).clear("SAC", tmp_path / "run.yaml")
    assert _tree(tmp_path) == before


def test_a_linked_damaged_folder_is_refused_before_anything_is_set_aside(run, tmp_path, capfd):
    """``checkpoints/damaged/`` a link out of the run folder: --resume, which would move a damaged checkpoint's
    files through it out of the folder, refuses first, naming the link."""
    other_disk = tmp_path / "other_disk"
    other_disk.mkdir()
    (run / "checkpoints" / "damaged").symlink_to(other_disk)
    (run / "checkpoints" / "model_40_steps.zip").write_bytes(b"damaged")  # of another size than its manifest says
    damaged = run / "checkpoints" / "damaged"
    for flags in (["--resume"], ["--overwrite"]):
        _, err = _unchanged(tmp_path, capfd, flags, 2, f"{damaged} is a link (to {other_disk}), where the run keeps")
        assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("name", ["run_files.json", "config.yaml", "final_model.zip", "learning_curves.csv"])
def test_a_folder_where_the_run_writes_a_file_is_refused_before_the_envs_are_built(run, tmp_path, capfd, name):
    """A folder named as a file the run writes (its record too) is refused at once, not after the envs are built."""
    (run / name).rename(run / "moved") if (run / name).exists() else None
    (run / name).mkdir()
    (run / name / "inside.txt").write_text("mine\n")
    out, err = _unchanged(tmp_path, capfd, ["--overwrite"], 2, f"{run / name} is a folder, where the run writes its")
    assert not out and len(err.strip().splitlines()) == 1, (out, err)  # refused before the start-up summary


def _full_disk_while_copying(monkeypatch) -> None:
    """A byte copy (shutil.copyfileobj) that meets a full disk after 4 KiB."""

    def copyfileobj(source, target, *args):
        target.write(source.read(4096))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copyfileobj", copyfileobj)


def test_a_full_disk_while_copying_the_final_model_is_the_full_disk_line(run, tmp_path, capfd, monkeypatch):
    """A run at rl.total_timesteps whose final model is not there yet copies its newest checkpoint's model: a full
    disk there ends with exit 1 and the one line that names the folder, the space and the command to continue,
    the partial copy removed, and the record and the checkpoints as they were."""
    _full_disk_while_copying(monkeypatch)
    _, err = _unchanged(
        tmp_path,
        capfd,
        ["--resume"],
        1,
        f"vlmrm-fast train: no space left on the disk of {run} for final_model.zip: it needs ",
        "Its partial file was removed; free at least ",
        f"then run: vlmrm-fast train {tmp_path / 'run.yaml'} --resume",
    )
    assert len(err.strip().splitlines()) == 1, err
    assert not list(run.glob(".*tmp*"))
    monkeypatch.setattr(shutil, "copyfileobj", _copyfileobj)  # room on the disk again: the command named works
    assert cli_main(["train", str(tmp_path / "run.yaml"), "--resume"]) == 0
    assert (run / "final_model.zip").read_bytes() == (run / "checkpoints" / "model_40_steps.zip").read_bytes()


def test_a_finished_run_without_a_record_changes_nothing_on_resume(run, tmp_path, capfd):
    """A finished run from before records: its final model is the byte copy of its final checkpoint's model (the
    sha256 that manifest holds), so --resume says the run is finished and writes, adopts and deletes nothing."""
    (run / "final_model.zip").write_bytes((run / "checkpoints" / "model_40_steps.zip").read_bytes())
    (run / "run_files.json").unlink()
    out, _ = _unchanged(tmp_path, capfd, ["--resume"], 0, "nothing to train: the run finished at 40 steps (rl.total")
    assert "is whole (its sha256 is the one model_40_steps.json holds for model_40_steps.zip)" in out, out


def test_a_missing_wandb_is_refused_before_overwrite_deletes_anything(run, tmp_path, capfd, monkeypatch):
    from vlmrm_fast.training import wandb_logging

    monkeypatch.setattr(wandb_logging, "installed", lambda name: False)
    cfg = yaml.safe_load((tmp_path / "run.yaml").read_text())
    cfg["logging"]["wandb"] = {"project": "p", "mode": "offline"}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    _unchanged(tmp_path, capfd, ["--overwrite"], 2, "logging.wandb needs wandb, which is not installed")


def test_what_rollout_writes_through_a_link_is_never_put_on_the_record(run, tmp_path):
    """``vlmrm-fast rollout`` and ``best`` add their files to the run's record where they lie in the run folder;
    through a link out of it (``rollouts/`` linked to another disk) the file is written and left off the record,
    which would otherwise name a path the record rule refuses."""
    from vlmrm_fast.training.run_files import write_in_run

    (tmp_path / "other_disk").mkdir()
    (run / "rollouts").symlink_to(tmp_path / "other_disk")
    write_in_run(run, run / "rollouts" / "episodes.csv", lambda path: path.write_text("episode,return\n"))
    assert (tmp_path / "other_disk" / "episodes.csv").read_text() == "episode,return\n"
    assert sorted(RunFiles(run).entries()) == ["config.yaml"]
    write_in_run(run, run / "best_checkpoints.csv", lambda path: path.write_text("rank\n"))
    assert sorted(RunFiles(run).owned()) == ["best_checkpoints.csv", "config.yaml"]
