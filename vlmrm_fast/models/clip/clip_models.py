"""load_clip: a model name (and optional checkpoint) -> an open_clip model with weights, on a device."""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from vlmrm_fast.frames.preprocess import PreprocessSpec
from vlmrm_fast.models.clip.families import check_requirements, family_of_config, model_config
from vlmrm_fast.models.clip.names import TINY_MODEL, parse_model_name, registered_preprocess_cfg
from vlmrm_fast.models.clip.tokenizers import load_tokenizer
from vlmrm_fast.models.hub import hub_folder, pretrained_file
from vlmrm_fast.models.random_init import RandomWeightsWarning, create_model


@dataclasses.dataclass
class LoadedClip:
    """An open_clip model in eval mode with what the reward model needs beside it."""

    model: Any
    tokenizer: Any
    preprocess: PreprocessSpec
    model_id: str  # as the user named it
    architecture: str  # open_clip config name (or the hub/local id)
    weights: str  # "random init (seed N)", a file path, or a tag
    weights_key: str  # identifies the weights for engine caches
    family: str = "clip"  # models.families key
    embed_size: int | None = None  # the config's embed_dim (timm towers have no output_dim)

    @property
    def logit_scale(self) -> float:
        return float(self.model.logit_scale.detach().exp().float().item())

    @property
    def logit_bias(self) -> float | None:
        """SigLIP's learned logit bias (its logits are ``scale * cos + bias``, read through a sigmoid);
        None for models trained with a softmax. See docs/models.md for what it does to the rewards."""
        bias = getattr(self.model, "logit_bias", None)
        return None if bias is None else float(bias.detach().float().item())

    @property
    def embed_dim(self) -> int:
        if self.embed_size is not None:
            return int(self.embed_size)
        return int(self.model.visual.output_dim)


def load_clip(
    model: str,
    pretrained: str | None = None,
    *,
    checkpoint: str | os.PathLike | None = None,
    device: torch.device | str = "cpu",
    cache_dir: str | None = None,
    seed: int = 0,
    quick_gelu: bool | None = None,
    tokenizer: str | os.PathLike | None = None,
) -> LoadedClip:
    """Builds the open_clip model named ``model`` with its weights, in eval mode on ``device``.

    ``tokenizer``: a folder holding the Hugging Face tokenizer of a model whose tokenizer lives on
    the hub (SigLIP), instead of the cache (see models/clip/tokenizers.py). Without a pretrained tag the
    preprocessing is the architecture's own: a registered config's ``preprocess_cfg``, else that
    of its pretrained tags when they all agree (a SigLIP's squash and 0.5 mean/std), else
    open_clip's default.
    """
    import open_clip

    device = torch.device(device)
    name, tag = parse_model_name(model, pretrained)
    if checkpoint is not None and tag is not None:
        raise ValueError(f"give either a pretrained tag ({tag!r}) or checkpoint=, not both")

    if name.startswith(("hf-hub:", "local-dir:")):
        folder = (
            hub_folder(name[len("hf-hub:") :], cache_dir) if name.startswith("hf-hub:") else name[len("local-dir:") :]
        )
        if not Path(folder).is_dir():
            raise FileNotFoundError(f"local-dir {folder!r} does not exist")
        config = _folder_config(folder)
        check_requirements(model, config)
        clip = create_model(f"local-dir:{folder}", device=device, seed=seed)
        text_tokenizer = (
            open_clip.get_tokenizer(f"local-dir:{folder}")
            if tokenizer is None
            else load_tokenizer(folder, model_id=model, tokenizer=str(tokenizer), config=config)
        )
        weights, key = folder, _file_key(folder)
        if checkpoint is not None:
            _load_checkpoint(clip, checkpoint, model)
            weights, key = str(checkpoint), _file_key(checkpoint)
    else:
        pcfg = open_clip.get_pretrained_cfg(name, tag) if tag else {}
        if tag and not pcfg and not Path(tag).is_file():
            tags = open_clip.list_pretrained_tags_by_model(name)
            raise ValueError(f"pretrained tag {tag!r} is unknown for {name}; known tags: {tags or 'none'}")
        gelu = pcfg.get("quick_gelu", False) if quick_gelu is None else quick_gelu
        config = model_config(name) or {}
        check_requirements(name, config)
        text_tokenizer = load_tokenizer(
            name, model_id=model, tokenizer=None if tokenizer is None else str(tokenizer), cache_dir=cache_dir
        )
        weights_file = None
        if tag:
            weights_file = Path(tag) if not pcfg else pretrained_file(name, tag, pcfg, cache_dir)
        elif checkpoint is not None:
            weights_file = Path(checkpoint)
        clip = create_model(name, device=device, seed=seed, quick_gelu=gelu)
        if weights_file is not None:
            _load_checkpoint(clip, weights_file, model)
            weights, key = str(weights_file), _file_key(weights_file)
        else:
            weights, key = f"random init (seed {seed})", f"random-{seed}"
            if name != TINY_MODEL:
                warnings.warn(
                    f"{name} has no pretrained weights (pretrained=None, checkpoint=None): random initialization. "
                    "Rewards are meaningless; fine for benchmarks. Use e.g. 'ViT-L-14/laion2b_s32b_b82k'.",
                    RandomWeightsWarning,
                    stacklevel=3,
                )
        own = pcfg or architecture_preprocess_cfg(name)
        if own:
            merged = open_clip.transform.merge_preprocess_dict(open_clip.get_model_preprocess_cfg(clip), own)
            open_clip.set_model_preprocess_cfg(clip, merged)
    clip.eval().requires_grad_(False)
    clip.to(device)
    return LoadedClip(
        model=clip,
        tokenizer=text_tokenizer,
        preprocess=PreprocessSpec.from_open_clip(clip),
        model_id=model if tag is None or "/" in model else f"{model}/{tag}",
        architecture=name,
        weights=weights,
        weights_key=key,
        family=family_of_config(config, name).key if config else "clip",
        embed_size=int(config["embed_dim"]) if config.get("embed_dim") else None,
    )


_PREPROCESS_KEYS = ("size", "mean", "std", "interpolation", "resize_mode", "fill_color")


def architecture_preprocess_cfg(name: str) -> dict[str, Any]:
    """The preprocessing of architecture ``name`` when no pretrained tag says it: the config's own
    (register_model_config), else its pretrained tags' when they all agree, else {} (open_clip's
    default: CLIP's mean/std, bicubic, shortest side)."""
    import open_clip

    registered = registered_preprocess_cfg(name)
    if registered:
        return registered
    cfgs = [open_clip.get_pretrained_cfg(name, tag) for tag in open_clip.list_pretrained_tags_by_model(name)]
    own = [{k: cfg[k] for k in _PREPROCESS_KEYS if k in cfg and k != "size"} for cfg in cfgs if cfg]
    if own and all(cfg == own[0] for cfg in own):
        return own[0]
    return {}


def _folder_config(folder: str) -> dict[str, Any]:
    import json

    path = Path(folder) / "open_clip_config.json"
    try:
        return dict(json.loads(path.read_text()).get("model_cfg") or {})
    except (OSError, ValueError):
        return {}  # open_clip reports a missing or broken config itself


def _load_checkpoint(clip, path: str | os.PathLike, model_name: str) -> None:
    import open_clip

    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(
            f"checkpoint {str(path)!r} is a folder, not a weights file: give the file inside it "
            f"(e.g. open_clip_model.safetensors), or model='local-dir:{path}' for a folder with open_clip_config.json"
        )
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    try:
        open_clip.load_checkpoint(clip, str(path), strict=True)
    except Exception as exc:  # pickle, safetensors, shape and key errors
        raise ValueError(_checkpoint_error(path, model_name, exc)) from exc


def _checkpoint_error(path: Path, model_name: str, exc: Exception) -> str:
    """What went wrong loading ``path``, without torch's advice to retry with weights_only=False:
    that would run arbitrary code from the file and does not mend a damaged one."""
    head = f"checkpoint {str(path)!r} could not be loaded into {model_name}"
    text = str(exc)
    shape_error = isinstance(exc, RuntimeError) and (
        "size mismatch" in text or "Missing key" in text or "Unexpected key" in text
    )
    if shape_error or isinstance(exc, AssertionError):  # open_clip asserts when resizing position embeddings
        first = next(
            (
                line.strip()
                for line in text.splitlines()
                if "size mismatch" in line or "Missing key" in line or "Unexpected key" in line
            ),
            text,
        )
        return (
            f"{head}: it holds weights of another architecture ({first[:200] or type(exc).__name__}). "
            f"Name the model it was saved from (model=...), or give weights saved from {model_name}"
        )
    detail = (
        text.split("WeightsUnpickler error:", 1)[1].strip().split("\n\n")[0].strip()
        if "WeightsUnpickler error:" in text
        else ""
    )
    if "Unsupported global" in detail:
        return (
            f"{head}: it holds pickled Python objects ({detail.split(' was not')[0]}), not only tensors, and is not "
            f"run as code. If you trust its source, load it in your own code and save the weights alone: "
            f"torch.save(model.state_dict(), 'weights.pt')"
        )
    if isinstance(exc, OSError):  # the file is there but cannot be read
        return f"{head}: {exc.strerror or _first_line(text)}; check its permissions and the disk it is on"
    # Anything else the unpickler or the zip reader trips over (an IndexError, a KeyError, ...) is a file
    # that is not weights: say so, whatever error its bytes happened to raise.
    reason = detail or f"the loader stopped at {type(exc).__name__}: {_first_line(text)}".rstrip(": ")
    return (
        f"{head}: it is not a readable weights file ({path.stat().st_size} bytes), neither a whole torch.save "
        f"state dict nor a safetensors file ({reason}). It may be damaged or cut short: download or copy it again"
    )


def _first_line(text: str) -> str:
    """The first sentence of an error text (torch's run on with advice after it)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line.split(". ")[0][:300]


def _file_key(path: str | os.PathLike) -> str:
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return str(p)
    return f"{p.resolve()}:{st.st_size}:{int(st.st_mtime)}"
