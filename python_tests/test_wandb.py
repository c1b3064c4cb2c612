"""Weights & Biases logging of ``vlmrm-fast train`` in offline mode (never the network): the run
folder's W&B run holds the config, the scalars TensorBoard gets and the policy video, and a resume
continues the same W&B run. The offline run file is read record by record (wandb's protobuf
records in LevelDB's log format, as ``wandb sync`` reads it)."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest
import yaml
from test_training import CONFIG

from vlmrm_fast.cli import main as cli_main
from vlmrm_fast.training.config import ConfigError, load_config

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),  # see conftest.py
    pytest.mark.slow,  # training runs logged to W&B offline: left out of the quick subset (-m "not slow")
]


def wandb_records(path: pathlib.Path) -> list:
    """The protobuf records of an offline W&B run file: a 7-byte header (":W&B", key, version), then
    LevelDB log records (crc32, length, type: full, first, middle, last) in 32 KiB blocks."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is no W&B run file"
    pos, block, pending, chunks = 7, 32768, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            chunks.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            chunks.append(pending + chunk)
    return [pb.Record.FromString(chunk) for chunk in chunks]


def offline_runs(run: pathlib.Path) -> list[tuple[str, dict, set]]:
    """(W&B run id, config, history keys) of each offline W&B run in a training run's folder."""
    found = []
    for path in sorted((run / "wandb").glob("offline-run-*/run-*.wandb")):
        run_id, config, keys = "", {}, set()
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run_id = record.run.run_id
                config = {item.key: json.loads(item.value_json) for item in record.run.config.update}
            elif kind == "history":
                keys |= {item.key or "/".join(item.nested_key) for item in record.history.item}
        found.append((run_id, config, keys))
    return found


def test_offline_wandb_run_holds_config_scalars_and_video_and_resumes(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed: pip install '.[wandb]'")
    monkeypatch.setenv("WANDB_MODE", "offline")  # belt and braces: the config says offline too
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = copy.deepcopy(CONFIG)
    cfg["output_dir"] = str(tmp_path / "run")
    cfg["rl"]["total_timesteps"] = 60
    cfg["logging"] = {"checkpoint_every": 40, "video_every": 60, "wandb": {"project": "vlmrm-test", "mode": "offline"}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli_main(["train", str(path)]) == 0
    run = tmp_path / "run"
    [(run_id, config, keys)] = offline_runs(run)
    assert (run / "wandb_run_id").read_text().strip() == run_id
    assert config["logging"]["wandb"] == {"project": "vlmrm-test", "mode": "offline"}
    assert config["env"]["task"] == "humanoid-kneeling" and config["reward"]["model"] == "vlmrm-tiny"
    # TensorBoard's scalars, mirrored by wandb's TensorBoard sync, and the policy video
    assert {"rollout/ep_vlm_reward_mean", "rollout/ep_gt_reward_mean", "train/critic_loss"} <= keys
    assert {"video/ep_vlm_reward", "video/policy/path"} <= keys

    assert cli_main(["train", str(path), "--resume", "--total-timesteps", "100"]) == 0
    runs = offline_runs(run)
    assert len(runs) == 2 and {r[0] for r in runs} == {run_id}, "the resume continues the same W&B run"
    assert "rollout/ep_vlm_reward_mean" in runs[1][2]


@pytest.mark.parametrize(
    "wandb,message",
    [
        ({"project": "p", "mode": "sometimes"}, "logging.wandb.mode: .sometimes. is not one of online, offline"),
        ({"mode": "offline"}, "logging.wandb.project: required field is missing"),
        ({"project": "p", "entity": "me"}, "logging.wandb.entity: unknown field"),
        ("p", "logging.wandb: expected a mapping"),
    ],
)
def test_wandb_config_errors_name_the_field(tmp_path, wandb, message):
    cfg = copy.deepcopy(CONFIG)
    cfg["logging"]["wandb"] = wandb
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_wandb_mirrors_tensorboard_so_it_needs_it(tmp_path):
    cfg = copy.deepcopy(CONFIG)
    cfg["logging"].update(tensorboard=False, wandb={"project": "p"})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="logging.wandb: mirrors the TensorBoard logs"):
        load_config(path)
    cfg["logging"]["tensorboard"] = True
    path.write_text(yaml.safe_dump(cfg))
    assert load_config(path).logging.wandb.mode == "online"
