"""Labelled-state datasets: states of a task, their frames, and human labels.

Workflow::

    ds = StateDataset.sample("humanoid-kneeling", 200, policy="runs/x/final_model.zip")
    ds.save("kneeling.npz")            # states, frames, labels (NaN = unlabelled)
    StateDataset.sample_episodes("humanoid-kneeling", 10)   # every state of 10 whole episodes, in order
    ds.contact_sheet("kneeling.png")   # numbered thumbnails to label from
    ds.write_label_template("kneeling_labels.csv")
    # ... a person fills the `label` column (1 = goal reached, 0 = not; or any score) ...
    ds = ds.with_labels(read_labels("kneeling_labels.csv", len(ds)))
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import pathlib
import zipfile
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from vlmrm_fast.envs import get_task
from vlmrm_fast.evaluation.states import render_states, sample_episodes, sample_states

SHEET_PAGE = 100  # thumbnails per contact-sheet image
_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f"}


@dataclasses.dataclass
class StateDataset:
    """N states of ``task`` with their frames and labels (NaN where unlabelled)."""

    task: str
    states: np.ndarray  # (N, S) float64
    frames: np.ndarray  # (N, H, W, 3) uint8
    state_names: tuple[str, ...]
    labels: np.ndarray | None = None  # (N,) float64, NaN = unlabelled
    source: str = "random"  # "random" or the policy file the states came from
    seed: int = 0
    # (N,) the episode of each state, for a dataset of whole episodes (each one's states in order, one after
    # another); None for states drawn at random. Window reward models score windows of an episode's frames.
    episodes: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.states = np.asarray(self.states, dtype=np.float64)
        self.frames = np.asarray(self.frames)
        self.state_names = tuple(str(n) for n in self.state_names)
        n = self.states.shape[0]
        if self.states.ndim != 2 or self.states.shape[1] != len(self.state_names):
            raise ValueError(
                f"states must be (N, {len(self.state_names)}) to match state_names, got {self.states.shape}"
            )
        if (
            self.frames.dtype != np.uint8
            or self.frames.ndim != 4
            or self.frames.shape[0] != n
            or self.frames.shape[3] != 3
        ):
            raise ValueError(f"frames must be uint8 (N={n}, H, W, 3), got {self.frames.dtype} {self.frames.shape}")
        self.labels = np.full(n, np.nan) if self.labels is None else np.asarray(self.labels, dtype=np.float64)
        if self.labels.shape != (n,):
            raise ValueError(f"labels must be ({n},), got {self.labels.shape}")
        if self.episodes is not None:
            self.episodes = np.asarray(self.episodes, dtype=np.int64)
            if self.episodes.shape != (n,) or (np.diff(self.episodes) < 0).any():
                raise ValueError(f"episodes must be ({n},) episode numbers, each episode's states one after another")

    def episode_ranges(self) -> list[np.ndarray]:
        """The state indices of each episode, in order (a dataset of whole episodes)."""
        if self.episodes is None:
            raise ValueError(
                "this dataset holds states drawn at random, not whole episodes: sample one with "
                "`vlmrm-fast dataset sample TASK --episodes N` (StateDataset.sample_episodes)"
            )
        bounds = np.flatnonzero(np.diff(self.episodes)) + 1
        return np.split(np.arange(len(self)), bounds)

    def __len__(self) -> int:
        return self.states.shape[0]

    @property
    def labelled(self) -> np.ndarray:
        """Boolean mask of the labelled states."""
        return ~np.isnan(self.labels)

    # ------------------------------------------------------------------ creation
    @classmethod
    def sample(
        cls,
        task: str,
        n: int,
        *,
        policy: Any = None,
        seed: int = 0,
        size: tuple[int, int] | None = None,
        thin: int = 4,
        progress: bool = False,
    ) -> StateDataset:
        """Samples ``n`` states (random actions, or ``policy``) and renders them at ``size`` (height, width)."""
        spec = get_task(task)
        states, names = sample_states(spec, n, policy=policy, seed=seed, thin=thin, progress=progress)
        frames = render_states(spec, states, size=size, progress=progress)
        return cls(spec.name, states, frames, names, source=_source_of(policy), seed=seed)

    @classmethod
    def sample_episodes(
        cls,
        task: str,
        episodes: int,
        *,
        policy: Any = None,
        seed: int = 0,
        size: tuple[int, int] | None = None,
        progress: bool = False,
    ) -> StateDataset:
        """Every state of ``episodes`` whole episodes (random actions, or ``policy``), in order, rendered at ``size``."""
        spec = get_task(task)
        states, names, episode_of = sample_episodes(spec, episodes, policy=policy, seed=seed, progress=progress)
        frames = render_states(spec, states, size=size, progress=progress)
        return cls(spec.name, states, frames, names, source=_source_of(policy), seed=seed, episodes=episode_of)

    def rendered(self, size: tuple[int, int] | None = None, *, progress: bool = False) -> StateDataset:
        """The same states and labels with frames rendered again at ``size`` (height, width)."""
        frames = render_states(self.task, self.states, size=size, progress=progress)
        return dataclasses.replace(self, frames=frames)

    def with_labels(self, labels: Any) -> StateDataset:
        return dataclasses.replace(self, labels=np.asarray(labels, dtype=np.float64).copy())

    # ------------------------------------------------------------------- storage
    def save(self, path: str | pathlib.Path) -> pathlib.Path:
        """Writes a compressed ``.npz``."""
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"task": self.task, "source": self.source, "seed": int(self.seed), "version": 1}
        with open(path, "wb") as f:  # an open file keeps numpy from appending .npz to the name
            episodes = {} if self.episodes is None else {"episodes": self.episodes}
            np.savez_compressed(
                f,
                states=self.states,
                frames=self.frames,
                labels=self.labels,
                state_names=np.array(self.state_names, dtype=str),
                meta=np.array(json.dumps(meta)),
                **episodes,
            )
        return path

    @classmethod
    def load(cls, path: str | pathlib.Path) -> StateDataset:
        path = pathlib.Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"dataset {str(path)!r} does not exist (make one with `vlmrm-fast dataset sample`)")
        remake = "make one with `vlmrm-fast dataset sample`"
        if not zipfile.is_zipfile(path):  # numpy would read any other file as a pickle (and advise unpickling it)
            raise ValueError(f"{path} is not a vlmrm-fast dataset: not an .npz file (a zip of arrays); {remake}")
        try:
            with np.load(path, allow_pickle=False) as data:
                missing = {"states", "frames", "labels", "state_names", "meta"} - set(data.files)
                if missing:
                    raise ValueError(f"{path} is not a vlmrm-fast dataset: missing {sorted(missing)}")
                meta = json.loads(str(data["meta"]))
                return cls(
                    meta["task"],
                    data["states"],
                    data["frames"],
                    tuple(data["state_names"].tolist()),
                    labels=data["labels"],
                    source=meta.get("source", "random"),
                    seed=meta.get("seed", 0),
                    episodes=data["episodes"] if "episodes" in data.files else None,
                )
        except (ValueError, KeyError, OSError, zipfile.BadZipFile) as exc:
            if str(exc).startswith(str(path)):
                raise
            if isinstance(exc, KeyError):
                why = f"its metadata lacks {exc.args[0]!r}"
            else:
                why = "it holds Python objects, which a dataset never does" if "pickle" in str(exc) else str(exc)
            raise ValueError(f"{path} is not a vlmrm-fast dataset: {why.splitlines()[0][:200]}; {remake}") from None

    # -------------------------------------------------------------------- labels
    def write_label_template(self, path: str | pathlib.Path) -> pathlib.Path:
        """A CSV with columns ``index,label`` (labels filled in where known) for a person to complete."""
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["index", "label"])
            for i, label in enumerate(self.labels):
                writer.writerow([i, "" if math.isnan(label) else f"{label:g}"])
        return path

    def contact_sheet(self, path: str | pathlib.Path, *, columns: int = 10, thumb: int = 128) -> list[pathlib.Path]:
        """Numbered thumbnails (with labels where known) as PNGs of up to 100 frames each.

        Writes ``path`` itself when one page is enough, else ``<stem>_01.png``, ...
        """
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        pages = max(1, math.ceil(len(self) / SHEET_PAGE))
        written = []
        for page in range(pages):
            indices = range(page * SHEET_PAGE, min(len(self), (page + 1) * SHEET_PAGE))
            out = path if pages == 1 else path.with_name(f"{path.stem}_{page + 1:02d}{path.suffix}")
            self._sheet_page(indices, columns, thumb).save(out)
            written.append(out)
        return written

    def _sheet_page(self, indices: range, columns: int, thumb: int) -> Image.Image:
        h, w = self.frames.shape[1:3]
        scale = thumb / max(h, w)
        tw, th = max(1, round(w * scale)), max(1, round(h * scale))
        columns = max(1, min(columns, len(indices)))
        rows = math.ceil(len(indices) / columns)
        pad = 4
        sheet = Image.new("RGB", (columns * (tw + pad) + pad, rows * (th + pad) + pad), (255, 255, 255))
        draw = ImageDraw.Draw(sheet)
        font = ImageFont.load_default()
        for k, i in enumerate(indices):
            x = pad + (k % columns) * (tw + pad)
            y = pad + (k // columns) * (th + pad)
            sheet.paste(Image.fromarray(self.frames[i]).resize((tw, th), Image.Resampling.BICUBIC), (x, y))
            text = str(i) if math.isnan(self.labels[i]) else f"{i}: {self.labels[i]:g}"
            box = draw.textbbox((x + 2, y + 1), text, font=font)
            draw.rectangle((box[0] - 2, box[1] - 1, box[2] + 2, box[3] + 1), fill=(0, 0, 0))
            draw.text((x + 2, y + 1), text, fill=(255, 255, 255), font=font)
        return sheet


def read_labels(path: str | pathlib.Path, n: int) -> np.ndarray:
    """Labels (n,) from a CSV with ``index`` and ``label`` columns; NaN for states not listed or left empty.

    A label is a number, or true/false/yes/no (1/0).
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"labels file {str(path)!r} does not exist")
    labels = np.full(n, np.nan)
    seen: set[int] = set()
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields = {name.strip().lower(): name for name in reader.fieldnames or ()}
        if "index" not in fields or "label" not in fields:
            raise ValueError(f"{path}: the header must name the columns 'index' and 'label', got {reader.fieldnames}")
        for line, row in enumerate(reader, start=2):
            raw_index, raw_label = (row[fields["index"]] or "").strip(), (row[fields["label"]] or "").strip()
            try:
                i = int(raw_index)
            except ValueError:
                raise ValueError(f"{path}:{line}: index {raw_index!r} is not an integer") from None
            if not 0 <= i < n:
                raise ValueError(f"{path}:{line}: index {i} is out of range for a dataset of {n} states")
            if i in seen:
                raise ValueError(f"{path}:{line}: index {i} is labelled twice")
            seen.add(i)
            labels[i] = _parse_label(raw_label, f"{path}:{line}")
    return labels


def _parse_label(text: str, where: str) -> float:
    if not text:
        return math.nan
    low = text.lower()
    if low in _TRUE:
        return 1.0
    if low in _FALSE:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: label {text!r} is not a number or true/false") from None
    if not math.isfinite(value):
        raise ValueError(f"{where}: label {text!r} must be finite (leave it empty for unlabelled)")
    return value


def _source_of(policy: Any) -> str:
    """What sampled a dataset's states, as its file records it: "random", a policy's path, or its type."""
    if policy is None:
        return "random"
    return str(policy) if isinstance(policy, (str, pathlib.Path)) else type(policy).__name__
