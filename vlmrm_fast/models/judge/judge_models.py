"""A judge by name: a tiny random model (``vlmrm-tiny-qwen2-vl``, ...), a local folder, or a hub repository
(``Qwen/Qwen2-VL-2B-Instruct``), loaded with its processor, in eval mode on a device.

Hub repositories come from the Hugging Face cache first; the hub is asked only when the cache lacks them
and it answers within seconds, so that an offline machine fails fast with the ``vlmrm-fast download``
line; a download reads the repository's ``config.json`` first and refuses a model that is no judge before
its weights come. A name is a judge's (:func:`is_judge_name`) when it is a tiny judge, a folder with a
transformers ``config.json`` (and no ``open_clip_config.json``), or ``org/repo`` whose first part is no
open_clip architecture; every other name is CLIP's (``vlmrm_fast.models.load_clip``). Names that are
neither as they stand (a folder that does not exist or holds no model, a tiny name misspelt, an open_clip
repository of the hub without ``hf-hub:``) are refused first, by :func:`check_model_name`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
from pathlib import Path
from typing import Any

import torch

from vlmrm_fast.checks import FieldError
from vlmrm_fast.models.errors import WeightsUnavailableError
from vlmrm_fast.models.judge.contract import check_contract
from vlmrm_fast.models.judge.families import JudgeFamily, judge_family, require_judge_packages
from vlmrm_fast.models.judge.tiny import TINY_JUDGES
from vlmrm_fast.models.network import hf_endpoint, hub_offline, network_reachable
from vlmrm_fast.models.random_init import _LocalGenerator

#: The files of a hub judge that loading needs: configs, weights, tokenizer, chat template.
JUDGE_FILES = ("*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken")


@dataclasses.dataclass
class LoadedJudge:
    """A judge's transformers model (eval mode, on its device) and processor."""

    model: Any
    processor: Any
    family: JudgeFamily
    model_id: str  # as the user named it
    weights: str  # "random init (seed N)" or the folder the weights came from


def is_judge_name(name: str) -> bool:
    """Whether ``name`` names a judge rather than a CLIP model (see the module docstring); no network."""
    if not isinstance(name, str):
        return False
    name = name.strip()
    if name in TINY_JUDGES:
        return True
    folder = folder_of(name)
    if folder is not None:
        return (folder / "config.json").is_file() and not (folder / "open_clip_config.json").is_file()
    if name.startswith("hf-hub:") or name.count("/") != 1:
        return False
    from vlmrm_fast.models.clip.names import known_models

    first = name.split("/")[0]
    models = known_models()
    # A CLIP name with a typo ("ViT-L-41/laion...") stays CLIP's, whose error names the close match.
    return first not in models and not difflib.get_close_matches(first, models, n=1, cutoff=0.8)


def check_model_name(name: str, cache_dir: str | None = None) -> None:
    """Refuses, in one line naming what is missing, a model name that names neither a judge nor a CLIP as it
    stands, by what the name is: a folder that does not exist, is a file or holds no model; a tiny model's
    name misspelt; an open_clip model of the Hugging Face hub named without ``hf-hub:`` (one of open_clip's
    pretrained repositories, or cached with its ``open_clip_config.json``). No network."""
    if not isinstance(name, str):
        return
    name = name.strip()
    folder = folder_of(name)
    if folder is not None:
        saved = "a judge's save_pretrained folder or hub snapshot (config.json), or an open_clip model's folder"
        if not folder.exists():
            raise FieldError("model", f"the folder {str(folder)!r} does not exist; give {saved}")
        if not folder.is_dir():
            raise FieldError(
                "model",
                f"{str(folder)!r} is a file, not a model's folder; give {saved} (a CLIP's weights file goes in "
                "checkpoint, beside an open_clip model name)",
            )
        if not any((folder / f).is_file() for f in ("config.json", "open_clip_config.json")):
            raise FieldError(
                "model",
                f"the folder {str(folder)!r} holds no model: neither a transformers config.json (a judge) nor an "
                "open_clip_config.json (a CLIP)",
            )
        return
    from vlmrm_fast.models.clip.names import TINY_MODEL, known_models

    architecture = name.split("/")[0]
    if architecture.startswith(TINY_MODEL) and name not in TINY_JUDGES and architecture not in known_models():
        tiny = [TINY_MODEL, *TINY_JUDGES]
        close = difflib.get_close_matches(name, tiny, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise FieldError(
            "model",
            f"{name!r} is no tiny model; {hint}The tiny random models are {TINY_MODEL!r} (CLIP) and the judges "
            f"{', '.join(map(repr, TINY_JUDGES))}",
        )
    if name.count("/") == 1 and not name.startswith("hf-hub:") and architecture not in known_models():
        clip = open_clip_hub_name(name, cache_dir)
        if clip is not None:
            raise FieldError(
                "model",
                f"{name!r} is an open_clip model on the Hugging Face hub (a CLIP): name it 'hf-hub:{name}'"
                + (f" or {clip!r}" if clip != f"hf-hub:{name}" else ""),
            )


def open_clip_hub_name(repo_id: str, cache_dir: str | None = None) -> str | None:
    """The open_clip name of hub repository ``repo_id`` when it holds an open_clip model (``'ViT-B-32/laion2b_s34b_b79k'``
    for one of open_clip's pretrained repositories, else ``'hf-hub:org/repo'`` when its ``open_clip_config.json``
    is cached), or None."""
    from vlmrm_fast.models.hub import cached_hf_file

    known = _open_clip_hub_repos().get(repo_id.lower())
    if known is not None:
        return known
    try:
        cached = cached_hf_file(repo_id, ("open_clip_config.json",), cache_dir)
    except ValueError:  # no valid repository id ("a b/c"): the loaders name it
        return None
    return f"hf-hub:{repo_id}" if cached else None


@functools.cache
def _open_clip_hub_repos() -> dict[str, str]:
    """open_clip's pretrained weights that live in a hub repository: the repository (lower case) -> the first
    ``name/tag`` open_clip knows it by."""
    import open_clip

    repos: dict[str, str] = {}
    for model, tag in open_clip.list_pretrained():
        hub = open_clip.get_pretrained_cfg(model, tag).get("hf_hub") or ""
        repo = "/".join(hub.strip("/").split("/")[:2])
        if repo.count("/") == 1:
            repos.setdefault(repo.lower(), f"{model}/{tag}")
    return repos


def folder_of(name: str) -> Path | None:
    if name.startswith("local-dir:"):
        return Path(name[len("local-dir:") :])
    path = Path(name).expanduser()
    return path if name.startswith(("/", ".", "~")) or path.is_dir() else None


def load_judge(
    name: str,
    *,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    cache_dir: str | None = None,
    seed: int = 0,
) -> LoadedJudge:
    """The judge ``name`` (see the module docstring) in eval mode on ``device`` in ``dtype``; random weights
    from ``seed`` for a tiny judge."""
    require_judge_packages(name)
    name = name.strip()
    if name in TINY_JUDGES:
        return _tiny(name, device, dtype, seed)
    folder = folder_of(name)
    if folder is None:
        folder = Path(judge_folder(name, cache_dir))
    elif not folder.is_dir():
        raise FileNotFoundError(f"model folder {str(folder)!r} does not exist")
    return _from_folder(name, folder, device, dtype)


def _tiny(name: str, device: torch.device, dtype: torch.dtype, seed: int) -> LoadedJudge:
    from transformers import AutoModelForImageTextToText

    recipe = TINY_JUDGES[name]
    family = judge_family({"model_type": recipe.model_type}, name)
    require_judge_packages(name, family)
    check_contract(name, family.model_type)
    config, processor = recipe.build()
    # Random weights from a generator of our own: the same for a seed in any process or thread.
    with _LocalGenerator(torch.Generator().manual_seed(seed)):
        model = AutoModelForImageTextToText.from_config(config, attn_implementation="sdpa")
    model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    return LoadedJudge(model, processor, family, name, f"random init (seed {seed})")


def _from_folder(name: str, folder: Path, device: torch.device, dtype: torch.dtype) -> LoadedJudge:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"model {name!r}: {folder / 'config.json'} is not a readable transformers config ({exc})"
        ) from None
    family = judge_family(config, name)
    require_judge_packages(name, family)
    check_contract(name, family.model_type)
    processor = AutoProcessor.from_pretrained(folder)
    model: Any = AutoModelForImageTextToText.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa")
    model = model.to(device).eval().requires_grad_(False)
    return LoadedJudge(model, processor, family, name, str(folder))


def set_image_options(judge: LoadedJudge, do_image_splitting: bool | None, longest_edge: int | None) -> None:
    """Sets a tiling family's processor (SmolVLM, Idefics3): whether it cuts a frame into tiles, and the longest
    edge it resizes a frame to before; None keeps the processor's own. The judge's device steps and the
    processor read the same settings. Refused, naming the field, for a family whose processor has no tiles."""
    for field, value in (("do_image_splitting", do_image_splitting), ("longest_edge", longest_edge)):
        if value is not None and not judge.family.tiles:
            raise FieldError(
                field,
                f"sets how SmolVLM and Idefics3 cut a frame into tiles; {judge.model_id} is a {judge.family.name}, whose "
                "tokens per frame follow image_size: leave it out",
            )
    image_processor = judge.processor.image_processor
    if do_image_splitting is not None:
        image_processor.do_image_splitting = do_image_splitting
    if longest_edge is not None:
        from transformers.image_utils import SizeDict

        image_processor.size = SizeDict(longest_edge=longest_edge)


def judge_folder(repo_id: str, cache_dir: str | None = None) -> str:
    """The cache snapshot holding hub judge ``repo_id``: the cached one (with its weights), else downloaded when
    the hub answers, else a :class:`~vlmrm_fast.models.errors.WeightsUnavailableError` naming the download.
    A download reads the repository's ``config.json`` first: a model that is no judge here (a CLIP, a
    text-only model, a family without an adapter) is refused before its weights come."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(
            repo_id, cache_dir=cache_dir, allow_patterns=list(JUDGE_FILES), local_files_only=True
        )
        if any(Path(folder).glob("*.safetensors")):  # a snapshot cut short holds its config alone
            return folder
    except LocalEntryNotFoundError:
        pass
    check_judge_reachable(repo_id, cache_dir)
    family = judge_family(_hub_config(repo_id, cache_dir), repo_id)
    require_judge_packages(repo_id, family)
    return snapshot_download(repo_id, cache_dir=cache_dir, allow_patterns=list(JUDGE_FILES))


def _hub_config(repo_id: str, cache_dir: str | None) -> dict[str, Any]:
    """The ``config.json`` of hub repository ``repo_id``, downloaded alone; one line for a repository without one
    (an open_clip model's holds ``open_clip_config.json``)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        path = hf_hub_download(repo_id, "config.json", cache_dir=cache_dir)
    except EntryNotFoundError:
        clip = open_clip_hub_name(repo_id, cache_dir)
        if clip is None:
            try:
                hf_hub_download(repo_id, "open_clip_config.json", cache_dir=cache_dir)
                clip = f"hf-hub:{repo_id}"
            except EntryNotFoundError:
                pass
        if clip is not None:
            raise FieldError(
                "model", f"{repo_id!r} is an open_clip model on the Hugging Face hub (a CLIP): name it {clip!r}"
            ) from None
        raise FieldError(
            "model", f"the hub repository {repo_id!r} holds no config.json: it is no transformers model, so no judge"
        ) from None
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"model {repo_id!r}: its config.json is not a readable transformers config ({exc})") from None


def check_judge_reachable(repo_id: str, cache_dir: str | None = None) -> None:
    """Raises the ``vlmrm-fast download`` line when hub judge ``repo_id`` is neither cached nor downloadable
    now; without loading or downloading anything."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.constants import HF_HUB_CACHE

    if isinstance(try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir), str):
        return
    if not hub_offline() and network_reachable(hf_endpoint()):
        return
    reason = "HF_HUB_OFFLINE is set" if hub_offline() else f"{hf_endpoint()} is unreachable"
    cache_option = f" --cache-dir {cache_dir}" if cache_dir else ""
    raise WeightsUnavailableError(
        f"the judge {repo_id}: not in the local cache ({cache_dir or HF_HUB_CACHE}) and {reason}. On a machine with "
        f"network run `vlmrm-fast download {repo_id}{cache_option}` (or `hf download {repo_id}{cache_option}`), then "
        f"copy the cache folder here (or point HF_HUB_CACHE at it); or give the model's folder "
        f"(model='local-dir:/path/to/{repo_id.split('/')[-1]}'). (An open_clip model of the hub is named "
        f"'hf-hub:{repo_id}'.)"
    )
