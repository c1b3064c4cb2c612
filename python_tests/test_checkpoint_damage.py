"""Damaged checkpoints never cost a run its progress, a full disk leaves no orphan, and nothing a user owns
in a run folder is ever lost.

One short SAC run (tiny CLIP, 32-unit networks) saves checkpoints at 40, 80 and 120 steps,
keeping the replay buffers of the newest two. Each test copies it and damages the newest
checkpoint's model zip, manifest or replay buffer (bits flipped, cut short, deleted); then
``--resume`` continues from the newest intact checkpoint, or refuses with exit 2 having
changed nothing. Every file of the run's checkpoint folder is compared (name and sha256)
before and after: none is lost or overwritten; damaged ones are found in
``checkpoints/damaged/``. The user's own files beside a run (notes, a model kept by hand, a video, the
config file given) are compared the same way around ``--overwrite`` and ``--resume``: a run deletes only
files its records vouch for, after listing them.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import pathlib
import shutil

import pytest
import yaml
from stable_baselines3 import SAC

from vlmrm_fast.cli import main as cli_main
from vlmrm_fast.training import checkpoints

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),  # see conftest.py
    pytest.mark.slow,  # a training run and a resume for each kind of damage: left out of the quick subset (-m "not slow")
]

CONFIG = {
    "seed": 3,
    "reward": {"model": "vlmrm-tiny", "alpha": 0.5, "device": "cpu"},
    "env": {"task": "humanoid-kneeling", "n_envs": 2, "episode_length": 10, "render_size": 32},
    "rl": {
        "algorithm": "SAC",
        "total_timesteps": 120,
        "device": "cpu",
        "kwargs": {
            "learning_starts": 20,
            "batch_size": 16,
            "buffer_size": 1000,
            "policy_kwargs": {"net_arch": [32, 32]},
        },
    },
    "logging": {"checkpoint_every": 40, "video_every": 0, "tensorboard": False, "keep_replay_buffers": 2},
}
NEWEST = {
    "zip": "model_120_steps.zip",
    "manifest": "model_120_steps.json",
    "buffer": "model_replay_buffer_120_steps.pkl",
}


def _write_config(folder: pathlib.Path, run: pathlib.Path, **logging) -> pathlib.Path:
    cfg = copy.deepcopy(CONFIG)
    cfg["output_dir"] = str(run)
    cfg["logging"].update(logging)
    path = folder / f"{run.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_torch_thread_module) -> pathlib.Path:
    """A run with checkpoints at 40, 80 and 120 steps; the buffers of 80 and 120 kept."""
    folder = tmp_path_factory.mktemp("trained")
    run = folder / "run"
    assert cli_main(["train", str(_write_config(folder, run))]) == 0
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == sorted(
        [f"model_{n}_steps.{ext}" for n in (40, 80, 120) for ext in ("zip", "json")]
        + ["model_replay_buffer_80_steps.pkl", "model_replay_buffer_120_steps.pkl"]
    )
    return run


@pytest.fixture(scope="module")
def one_torch_thread_module():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _copy(trained: pathlib.Path, tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    return run, _write_config(tmp_path, run)


def _checksums(folder: pathlib.Path) -> dict[str, str]:
    """{path relative to folder: sha256} of every file under folder."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _damage(path: pathlib.Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "flip":  # 16 bytes XOR'd in the middle, the size unchanged
        middle = len(data) // 2
        data[middle : middle + 16] = bytes(b ^ 0x5A for b in data[middle : middle + 16])
        path.write_bytes(bytes(data))
    elif how == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:
        path.unlink()


def _assert_nothing_lost(before: dict[str, str], run: pathlib.Path) -> None:
    """Each checkpoint file of ``before`` is still there with its content: where it was, or set aside in
    checkpoints/damaged/; the only exception is the replay buffer the keep_replay_buffers option prunes."""
    after = _checksums(run / "checkpoints")
    kept_buffers = sorted(
        c.steps for c in checkpoints.scan(run / "checkpoints").complete if c.replay_buffer is not None
    )
    for name, digest in before.items():
        if after.get(name) == digest or after.get(f"{checkpoints.DAMAGED_DIR}/{name}") == digest:
            continue
        pruned = name.startswith("model_replay_buffer_") and len(kept_buffers) >= 2
        steps = int(name.split("_")[-2])
        assert pruned and steps < kept_buffers[0], f"{name} was lost or overwritten"


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
@pytest.mark.parametrize("which", ["zip", "manifest", "buffer"])
def test_resume_continues_from_the_newest_intact_checkpoint(trained, tmp_path, capfd, which, how):
    """Trained on to 160 steps: a damaged model of the newest checkpoint is restored from the final model, its
    byte copy (the manifest's sha256); damage elsewhere resumes from the newest intact checkpoint."""
    run, config = _copy(trained, tmp_path)
    _damage(run / "checkpoints" / NEWEST[which], how)
    before = _checksums(run / "checkpoints")
    assert cli_main(["train", str(config), "--resume", "--total-timesteps", "160"]) == 0
    err = capfd.readouterr().err
    moved = f"into {run / 'checkpoints' / checkpoints.DAMAGED_DIR}"
    if which == "zip":
        assert "resuming from model_120_steps.zip at 120 steps with its replay buffer" in err, err
        assert "restored model_120_steps.zip from final_model.zip, its byte copy" in err, err
        aside = set() if how == "delete" else {NEWEST["zip"]}
    else:  # the newest whole model with its whole replay buffer is that of 80 steps
        assert "resuming from model_80_steps.zip at 80 steps with its replay buffer" in err, err
        aside = {name for key, name in NEWEST.items() if not (key == which and how == "delete")}
    assert moved in err and "model_120_steps" in err.split(moved)[0], err
    _assert_nothing_lost(before, run)
    assert {p.name for p in (run / "checkpoints" / checkpoints.DAMAGED_DIR).iterdir()} == aside
    # the resumed run saved a new, whole checkpoint at 160
    newest = checkpoints.scan(run / "checkpoints").newest()
    assert newest.steps == 160 and checkpoints.verify(newest) == (None, None)
    assert SAC.load(run / "final_model.zip").num_timesteps == 160


@pytest.mark.parametrize("flags", [[], ["--allow-empty-replay-buffer"]], ids=["plain", "empty-buffer-allowed"])
@pytest.mark.parametrize("which", ["zip", "manifest", "buffer"])
def test_a_finished_run_whose_final_model_is_whole_is_never_trained_again(trained, tmp_path, capfd, which, flags):
    """The run reached rl.total_timesteps and its final model is whole: damage to the newest checkpoint changes
    nothing. --resume says the run is finished and writes, moves and deletes nothing (no retraining from an
    older checkpoint over the final model)."""
    run, config = _copy(trained, tmp_path)
    _damage(run / "checkpoints" / NEWEST[which], "flip")
    before = _checksums(run)
    assert cli_main(["train", str(config), "--resume", *flags]) == 0
    out = capfd.readouterr().out
    assert "nothing to train: the run finished at 120 steps (rl.total_timesteps is 120)" in out, out
    assert "final_model.zip is whole" in out and "--total-timesteps, to train on" in out, out
    assert _checksums(run) == before


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
@pytest.mark.parametrize("which", ["zip", "manifest", "buffer"])
def test_resume_refuses_and_changes_nothing_where_the_buffer_would_be_lost(trained, tmp_path, capfd, which, how):
    """As with the default keep_replay_buffers: 1, only the newest checkpoint has its buffer. Damage to it
    leaves no intact checkpoint with a buffer: refused, nothing written, moved or removed."""
    run, config = _copy(trained, tmp_path)
    (run / "final_model.zip").unlink()  # no whole final model: the run is not finished, nor restored from it
    (run / "checkpoints" / "model_replay_buffer_80_steps.pkl").unlink()
    (run / "checkpoints" / ".model_160_steps.zip.tmp").write_bytes(b"cut short")  # a kill's, kept on refusal too
    _damage(run / "checkpoints" / NEWEST[which], how)
    before = _checksums(run)
    assert cli_main(["train", str(config), "--resume"]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Nothing was changed" in err and "--allow-empty-replay-buffer" in err, err
    expected = {"zip": "model_80_steps.zip", "manifest": "model_80_steps.zip", "buffer": "model_120_steps.zip"}
    assert f"checkpoint {expected[which]}, the newest intact one" in err, err
    assert (which, how) == ("buffer", "delete") or "damaged" in err, err  # says what is wrong with the newer
    assert _checksums(run) == before


def test_an_empty_replay_buffer_accepted_continues_from_the_newest_intact_model(trained, tmp_path, capfd):
    run, config = _copy(trained, tmp_path)
    (run / "checkpoints" / "model_replay_buffer_80_steps.pkl").unlink()
    _damage(run / "checkpoints" / NEWEST["buffer"], "flip")
    before = _checksums(run / "checkpoints")
    assert cli_main(["train", str(config), "--resume", "--allow-empty-replay-buffer", "--total-timesteps", "160"]) == 0
    err = capfd.readouterr().err
    assert "resuming from model_120_steps.zip at 120 steps with an EMPTY replay buffer" in err, err
    assert "model_replay_buffer_120_steps.pkl: its sha256 differs from the manifest's" in err, err
    assert [p.name for p in (run / "checkpoints" / checkpoints.DAMAGED_DIR).iterdir()] == [NEWEST["buffer"]]
    _assert_nothing_lost(before, run)


def test_no_intact_checkpoint_refuses_with_nothing_changed(trained, tmp_path, capfd):
    run, config = _copy(trained, tmp_path)
    (run / "final_model.zip").unlink()  # no copy of the newest model to restore it from
    for steps in (40, 80, 120):
        _damage(run / "checkpoints" / f"model_{steps}_steps.zip", "flip")
    before = _checksums(run)
    assert cli_main(["train", str(config), "--resume", "--allow-empty-replay-buffer"]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no intact checkpoint in" in err and "Nothing was changed" in err, err
    assert "model_40_steps.zip" in err and "model_120_steps.zip" in err
    assert _checksums(run) == before


def test_resume_never_starts_from_scratch(tmp_path, capfd):
    run = tmp_path / "run"
    config = _write_config(tmp_path, run)
    assert cli_main(["train", str(config), "--resume"]) == 2
    err = capfd.readouterr().err.strip()
    assert "holds no checkpoint to resume from; nothing was changed" in err and "without --resume" in err, err
    assert not run.exists()


# ------------------------------------------------------------------ the user's files
def _overwrite_listing(err: str) -> set[str]:
    """The files --overwrite listed before deleting them (the lines under its "deleting" line)."""
    lines = err.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("--overwrite: deleting"))
    listed = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        listed.append(line.strip())
    return set(listed)


def _unchanged_but(before: dict[str, str], after: dict[str, str], rewritten: set[str]) -> None:
    """Every file of ``before`` is in ``after`` with its sha256, but those in ``rewritten``."""
    lost = {name for name, digest in before.items() if name not in rewritten and after.get(name) != digest}
    assert not lost, f"lost or changed: {sorted(lost)}"


RUN_OWNED = {
    "config.yaml",
    "final_model.zip",
    "learning_curves.csv",
    "learning_curves.png",
    "run_files.json",
    *(f"checkpoints/model_{n}_steps.{ext}" for n in (40, 80, 120) for ext in ("zip", "json")),
    "checkpoints/model_replay_buffer_80_steps.pkl",
    "checkpoints/model_replay_buffer_120_steps.pkl",
}


def test_overwrite_deletes_exactly_the_files_it_listed_and_keeps_the_users(trained, tmp_path, capfd):
    """A user's notes and model beside the run, in the run folder and in checkpoints/, what --resume set aside,
    and a checkpoint-named file no manifest vouches for: the refusal says what --overwrite deletes; --overwrite
    lists exactly the run's files before deleting them, keeps every other file, and moves the unvouched
    checkpoint file into checkpoints/damaged/ (a name the new run would write), never deleting it."""
    run, config = _copy(trained, tmp_path)
    (run / "checkpoints" / "README.txt").write_text("the good one is my_best_model.zip\n")
    shutil.copy(run / "checkpoints" / "model_80_steps.zip", run / "checkpoints" / "my_best_model.zip")
    (run / "checkpoints" / "model_7_steps.zip").write_bytes(b"a model of mine")  # no manifest names it
    (run / "checkpoints" / checkpoints.DAMAGED_DIR).mkdir()
    (run / "checkpoints" / checkpoints.DAMAGED_DIR / "model_20_steps.zip").write_bytes(b"set aside long ago")
    (run / "notes.txt").write_text("lr 3e-4 diverged\n")
    before = _checksums(run)

    assert cli_main(["train", str(config)]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert (
        f"{run} already holds a run (config.yaml, final_model.zip, learning_curves.csv, learning_curves.png, "
        "3 checkpoints (8 files), 1 checkpoint file no manifest vouches for (set aside by --overwrite))" in err
    ), err
    assert "start over with --overwrite (deletes those 13 files, each on the run's records, and nothing else)" in err
    assert _checksums(run) == before

    assert cli_main(["train", str(config), "--overwrite", "--total-timesteps", "20"]) == 0
    err = capfd.readouterr().err
    assert _overwrite_listing(err) == RUN_OWNED, err
    assert "--overwrite: moved model_7_steps.zip into" in err and "no manifest vouches for it" in err, err
    kept = "checkpoints/README.txt, checkpoints/damaged/model_20_steps.zip, checkpoints/my_best_model.zip, notes.txt"
    assert f"--overwrite: kept {kept} in {run}: no record shows a run wrote them" in err, err
    after = _checksums(run)
    assert after["checkpoints/damaged/model_7_steps.zip"] == before["checkpoints/model_7_steps.zip"]
    _unchanged_but(before, after, RUN_OWNED | {"checkpoints/model_7_steps.zip"})
    assert SAC.load(run / "final_model.zip").num_timesteps == 20  # the new run's
    assert not (run / "checkpoints" / "model_120_steps.zip").exists()


def test_a_folder_holding_only_a_users_video_is_no_run(tmp_path, capfd):
    """videos/holiday.mp4 alone is no run: the run starts there (no --overwrite needed), writes its videos
    beside it, and a later --overwrite deletes the run's videos and keeps the user's."""
    run = tmp_path / "run"
    (run / "videos").mkdir(parents=True)
    (run / "videos" / "holiday.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 my holiday")
    config = _write_config(tmp_path, run, video_every=20)
    before = _checksums(run)
    assert cli_main(["train", str(config), "--total-timesteps", "20"]) == 0
    after = _checksums(run)
    _unchanged_but(before, after, set())
    assert "videos/policy_000000020_steps.mp4" in after
    capfd.readouterr()
    assert cli_main(["train", str(config), "--total-timesteps", "20", "--overwrite"]) == 0
    err = capfd.readouterr().err
    assert "videos/policy_000000020_steps.mp4" in _overwrite_listing(err), err
    assert "videos/holiday.mp4" not in _overwrite_listing(err) and "kept videos/holiday.mp4" in err, err
    _unchanged_but(before, _checksums(run), set())


def test_the_config_file_given_is_never_deleted_or_rewritten(trained, tmp_path, capfd):
    """``train RUN/config.yaml`` with ``output_dir: RUN``: the hand-written config (its comments) is never
    deleted, moved or rewritten, by --overwrite, a start or --resume; the run reads it as its config."""
    run, _ = _copy(trained, tmp_path)
    cfg = copy.deepcopy(CONFIG)
    cfg["output_dir"] = str(run)
    given = run / "config.yaml"
    given.write_text("# my run: SAC on kneeling, tiny CLIP\n" + yaml.safe_dump(cfg) + "# ask before deleting\n")
    before = _checksums(run)

    assert cli_main(["train", str(given)]) == 2  # the run's other files are there
    assert _checksums(run) == before
    assert cli_main(["train", str(given), "--overwrite", "--total-timesteps", "20"]) == 0
    err = capfd.readouterr().err
    assert "config.yaml" not in _overwrite_listing(err), err
    assert "--overwrite: kept config.yaml, the config file given" in err, err
    _unchanged_but(before, _checksums(run), RUN_OWNED - {"config.yaml"})
    assert cli_main(["train", str(given), "--resume", "--total-timesteps", "40"]) == 0
    assert SAC.load(run / "final_model.zip").num_timesteps == 40
    assert _checksums(run)["config.yaml"] == before["config.yaml"]
    # given from elsewhere, the run's config.yaml is not the run's own: refused, nothing written over it
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(yaml.safe_dump(cfg))
    capfd.readouterr()
    assert cli_main(["train", str(elsewhere), "--resume", "--total-timesteps", "60"]) == 2
    err = capfd.readouterr().err
    assert "--resume: config.yaml in" in err and "not as the run wrote it" in err and "Move it away" in err, err
    assert _checksums(run)["config.yaml"] == before["config.yaml"]


def test_a_manifest_edited_to_still_parse_is_caught_by_its_own_checksum(trained, tmp_path):
    folder = tmp_path / "checkpoints"
    shutil.copytree(trained / "checkpoints", folder)
    manifest = folder / NEWEST["manifest"]
    manifest.write_text(manifest.read_text().replace('"steps": 120', '"steps": 121'))
    scan = checkpoints.scan(folder)
    assert [c.steps for c in scan.complete] == [40, 80]
    assert [d.why for d in scan.damaged] == ["the manifest's content differs from its checksum"]


# --------------------------------------------------------------------------- full disk
def _full_disk_at(monkeypatch, save_number: int) -> None:
    """The replay buffer of the ``save_number``-th checkpoint save hits a full disk after 4 KiB."""
    original = SAC.save_replay_buffer
    count = {"n": 0}

    def save_replay_buffer(self, path):
        count["n"] += 1
        if count["n"] == save_number:
            path.write(b"\0" * 4096)
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, path)

    monkeypatch.setattr(SAC, "save_replay_buffer", save_replay_buffer)


def test_a_full_disk_leaves_no_orphan_and_names_the_space_needed(tmp_path, monkeypatch, capfd):
    run = tmp_path / "run"
    config = _write_config(tmp_path, run, keep_replay_buffers=1)
    _full_disk_at(monkeypatch, 2)
    assert cli_main(["train", str(config)]) == 1
    err = capfd.readouterr().err.strip().splitlines()
    first = next(line for line in err if line.startswith("vlmrm-fast train:"))
    assert f"no space left on the disk of {run / 'checkpoints'} for the checkpoint at 80 steps" in first, err
    assert "it needs " in first and "(the model " in first and ", its replay buffer " in first, err
    assert "are free" in first and "free at least " in first and "--resume" in first, err
    # the failed save's model, buffer and mark are gone; the first checkpoint is whole
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "model_40_steps.json",
        "model_40_steps.zip",
        "model_replay_buffer_40_steps.pkl",
    ]
    scan = checkpoints.scan(run / "checkpoints")
    assert not scan.incomplete and not scan.damaged and checkpoints.verify(scan.newest()) == (None, None)


def test_a_full_disk_at_any_file_of_a_save_removes_that_save(tmp_path, monkeypatch):
    class Model:  # what save_checkpoint asks of an SB3 model
        num_timesteps = 80
        replay_buffer = None
        fail = ""

        def save(self, f):
            f.write(b"model" * 1000)
            if self.fail == "model":
                raise OSError(errno.ENOSPC, "No space left on device")

    checkpoints.save_checkpoint(Model(), tmp_path, reason="periodic")
    before = _checksums(tmp_path)
    failing = Model()
    failing.num_timesteps, failing.fail = 120, "model"
    with pytest.raises(checkpoints.CheckpointSpaceError, match=rf"disk of {tmp_path} .* needs ") as info:
        checkpoints.save_checkpoint(failing, tmp_path, reason="periodic")
    # what the save needs, measured: the model it would write (5,000 bytes) and the manifest's 64 KiB
    assert "it needs 68.9 KiB (the model 4.9 KiB)" in str(info.value), str(info.value)
    assert _checksums(tmp_path) == before
    # the manifest, written last, fails: the model already in place goes too

    def manifest_fails(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoints, "write_text_atomically", manifest_fails)
    failing.fail = ""
    with pytest.raises(checkpoints.CheckpointSpaceError):
        checkpoints.save_checkpoint(failing, tmp_path, reason="periodic")
    assert _checksums(tmp_path) == before


def test_start_if_new_starts_a_folder_without_checkpoints_and_only_that(trained, tmp_path, capfd):
    """--resume --start-if-new (the command a restarted or requeued job repeats): a folder with no checkpoint,
    or with only what a kill cut short before the first one, starts the run; a folder whose only checkpoints
    are damaged still refuses with nothing changed; without --resume the flag is refused."""
    run = tmp_path / "run"
    config = _write_config(tmp_path, run)
    assert cli_main(["train", str(config), "--start-if-new"]) == 2
    assert "--start-if-new goes with --resume" in capfd.readouterr().err
    assert not run.exists()

    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / ".model_40_steps.zip.tmp").write_bytes(b"cut short")  # killed during its first save
    assert cli_main(["train", str(config), "--resume", "--start-if-new"]) == 0
    err = capfd.readouterr().err
    assert f"--resume --start-if-new: no checkpoint in {run / 'checkpoints'} yet; starting the run" in err, err
    assert SAC.load(run / "final_model.zip").num_timesteps == 120
    assert not (run / "checkpoints" / ".model_40_steps.zip.tmp").exists()

    damaged, damaged_config = _copy(trained, tmp_path / "damaged")
    (damaged / "final_model.zip").unlink()  # no copy of the newest model to restore it from
    for steps in (40, 80, 120):
        _damage(damaged / "checkpoints" / f"model_{steps}_steps.zip", "flip")
    before = _checksums(damaged)
    assert cli_main(["train", str(damaged_config), "--resume", "--start-if-new"]) == 2
    assert "no intact checkpoint in" in capfd.readouterr().err
    assert _checksums(damaged) == before


def test_a_run_from_before_records_is_resumed_and_its_files_adopted(trained, tmp_path, capfd):
    """A run folder written before runs kept records (no run_files.json): --overwrite cannot prove its
    config.yaml, final model and curves are the run's, so it refuses with nothing changed; --resume continues
    the run (its checkpoints' manifests vouch for them) and records those files as its own."""
    run, config = _copy(trained, tmp_path)
    (run / "run_files.json").unlink()
    before = _checksums(run)
    assert cli_main(["train", str(config), "--overwrite"]) == 2
    err = capfd.readouterr().err
    assert "--overwrite: " in err and "config.yaml, final_model.zip, learning_curves.csv" in err, err
    assert "nothing was changed. Move them away" in err, err
    assert _checksums(run) == before
    assert cli_main(["train", str(config), "--resume", "--total-timesteps", "160"]) == 0
    err = capfd.readouterr().err
    assert "kept no record of the files its run wrote (a run from before records): recorded config.yaml" in err, err
    from vlmrm_fast.training.run_files import RunFiles

    assert {"config.yaml", "final_model.zip", "learning_curves.csv"} <= set(RunFiles(run).owned())
