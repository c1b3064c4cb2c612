"""Pretrained weights from the Hugging Face cache or hub, fast offline: the cache first, the network
probed with a short timeout, so a missing download fails in seconds with what to do about it
(open_clip alone retries for about a minute)."""

from __future__ import annotations

import os
from pathlib import Path

from vlmrm_fast.models.errors import WeightsUnavailableError
from vlmrm_fast.models.network import hf_endpoint, hub_offline, network_reachable

_HF_WEIGHT_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


def download_weights(model: str, pretrained: str | None = None, *, cache_dir: str | None = None) -> Path:
    """Fetches a model's pretrained weights into the local cache (or finds them there); returns the path.

    Run once on a machine with network; copy the cache (HF_HUB_CACHE, or ``cache_dir``)
    to machines without it. (:func:`download_model` fetches the tokenizer too.)
    """
    return download_model(model, pretrained, cache_dir=cache_dir)["weights"]


def download_model(model: str, pretrained: str | None = None, *, cache_dir: str | None = None) -> dict[str, Path]:
    """Fetches what loading ``model`` offline needs into the local cache (or finds it there): its
    pretrained weights and, for a model whose tokenizer lives on the hub (SigLIP), that tokenizer.
    Returns ``{"weights": path, "tokenizer": folder}`` (tokenizer only where there is one); for a generative
    VLM judge (``Qwen/Qwen2-VL-2B-Instruct``) ``{"model": folder}``, the snapshot of its weights, processor
    and tokenizer."""
    import open_clip

    from vlmrm_fast.models.clip.families import check_requirements, model_config
    from vlmrm_fast.models.clip.names import parse_model_name
    from vlmrm_fast.models.clip.tokenizers import download_tokenizer, hub_tokenizer_name
    from vlmrm_fast.models.judge import TINY_JUDGES, is_judge_name, judge_folder
    from vlmrm_fast.models.judge.judge_models import check_model_name

    check_model_name(model, cache_dir)
    if is_judge_name(model):
        if pretrained is not None:
            raise ValueError(
                f"pretrained={pretrained!r} does not apply to the judge {model!r}: its repository is its weights"
            )
        if model in TINY_JUDGES:
            raise ValueError(f"{model!r} is built in (random weights): nothing to download")
        if model.startswith("local-dir:") or Path(model).is_dir():
            raise ValueError(f"{model!r} is a local folder: nothing to download")
        return {"model": Path(judge_folder(model, cache_dir))}
    name, tag = parse_model_name(model, pretrained)
    if name.startswith("hf-hub:"):
        return {"weights": Path(hub_folder(name[len("hf-hub:") :], cache_dir))}
    if name.startswith("local-dir:"):
        raise ValueError(f"{model!r} is a local folder: nothing to download")
    config = model_config(name)
    repo = hub_tokenizer_name(config)
    if repo:
        check_requirements(name, config)  # transformers reads the tokenizer: say so before the download
    if not tag:
        tags = open_clip.list_pretrained_tags_by_model(name)
        raise ValueError(
            f"{name} needs a pretrained tag to download, e.g. {name}/{tags[0]}"
            if tags
            else f"{name} has no pretrained weights"
        )
    pcfg = open_clip.get_pretrained_cfg(name, tag)
    if not pcfg:
        raise ValueError(
            f"pretrained tag {tag!r} is unknown for {name}; known tags: {open_clip.list_pretrained_tags_by_model(name) or 'none'}"
        )
    try:
        found = {"weights": pretrained_file(name, tag, pcfg, cache_dir)}
        if repo:
            found["tokenizer"] = download_tokenizer(repo, cache_dir, model_id=f"{name}/{tag}")
    except WeightsUnavailableError:
        if not hub_offline():
            raise
        # The usual advice (run `vlmrm-fast download` where there is network) is this very command.
        raise WeightsUnavailableError(
            f"{name}/{tag}: not in the local cache, and HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')} keeps the "
            f"download from the hub; run it again without that variable (unset HF_HUB_OFFLINE)"
        ) from None
    return found


def _unavailable(what: str, where: str, model_id: str, source: str) -> WeightsUnavailableError:
    """``source``: the command that fetches the file by hand (``hf download REPO FILE``, or a URL)."""
    reason = "HF_HUB_OFFLINE is set" if hub_offline() else f"{hf_endpoint()} is unreachable"
    return WeightsUnavailableError(
        f"{what}: not in the local cache ({where}) and {reason}. On a machine with network run "
        f"`vlmrm-fast download {model_id}` (or {source}), then copy the cache folder here (or point HF_HUB_CACHE "
        f"at it); or use a local weights file (checkpoint='/path/to/weights', reward.checkpoint in a training config)."
    )


def cached_hf_file(repo_id: str, filenames: tuple[str, ...], cache_dir: str | None) -> str | None:
    from huggingface_hub import try_to_load_from_cache

    for filename in filenames:
        hit = try_to_load_from_cache(repo_id, filename, cache_dir=cache_dir)
        if isinstance(hit, str):
            return hit
    return None


def _cached_or_reachable(
    repo_id: str,
    filenames: tuple[str, ...],
    cache_dir: str | None,
    what: str,
    model_id: str,
    advice_files: tuple[str, ...] = (),
) -> str | None:
    """The cached file; None when it is not cached but the hub answers; a clear error when neither."""
    from huggingface_hub.constants import HF_HUB_CACHE

    hit = cached_hf_file(repo_id, filenames, cache_dir)
    if hit:
        return hit
    if hub_offline() or not network_reachable(hf_endpoint()):
        cache_option = f" --cache-dir {cache_dir}" if cache_dir else ""
        files = " ".join(advice_files or filenames[-1:])
        raise _unavailable(what, cache_dir or HF_HUB_CACHE, model_id, f"`hf download {repo_id} {files}{cache_option}`")
    return None


def _hf_file(
    repo_id: str,
    filenames: tuple[str, ...],
    cache_dir: str | None,
    what: str,
    model_id: str,
    advice_files: tuple[str, ...] = (),
) -> str:
    """The cached file, else a download (with progress) when the hub answers, else a clear error."""
    from huggingface_hub import hf_hub_download

    hit = _cached_or_reachable(repo_id, filenames, cache_dir, what, model_id, advice_files)
    if hit:
        return hit
    errors = []
    for filename in filenames:
        try:
            return hf_hub_download(repo_id, filename, cache_dir=cache_dir)
        except Exception as exc:  # EntryNotFound for the alternative name, HTTP errors
            errors.append(f"{filename}: {exc}")
    raise WeightsUnavailableError(f"could not download {what} from {repo_id}: " + "; ".join(errors))


def _hub_source(hub: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """A pretrained config's ``hf_hub`` -> (repo, the weight files to look for, the advice's file arguments)."""
    if hub.endswith("/"):
        return hub.rstrip("/"), _HF_WEIGHT_FILES, ('--include "open_clip_*"',)  # whichever format it holds
    repo_id, filename = os.path.split(hub)
    safe = os.path.splitext(filename)[0] + ".safetensors"
    return repo_id, (filename,) if filename == safe else (safe, filename), ()


def pretrained_file(name: str, tag: str, pcfg: dict, cache_dir: str | None) -> Path:
    what = f"the {name}/{tag} weights"
    if pcfg.get("file"):
        return Path(pcfg["file"])
    hub = pcfg.get("hf_hub", "")
    if hub:
        repo_id, candidates, advice = _hub_source(hub)
        return Path(_hf_file(repo_id, candidates, cache_dir, what, f"{name}/{tag}", advice))
    url = pcfg.get("url", "")
    if not url:
        raise WeightsUnavailableError(f"{what}: the pretrained config names no file, hub repo or URL")
    import open_clip

    target = _url_target(url, cache_dir)
    if target.is_file():
        return target
    if not network_reachable(url):
        raise _unavailable(what, str(target.parent), f"{name}/{tag}", f"`curl -L -o {target} {url}`")
    return Path(open_clip.pretrained.download_pretrained_from_url(url, cache_dir=cache_dir))


def _url_target(url: str, cache_dir: str | None) -> Path:
    return Path(cache_dir or os.path.expanduser("~/.cache/clip")) / os.path.basename(url)


def require_weights(model: str, pretrained: str | None = None, *, cache_dir: str | None = None) -> None:
    """Raises :class:`WeightsUnavailableError` when ``model``'s pretrained weights are neither cached nor
    downloadable now (the hub offline or unreachable), without loading or downloading anything: a job
    checks this before it builds its envs. Names without weights (random init, local files) pass."""
    import open_clip

    from vlmrm_fast.models.clip.names import parse_model_name
    from vlmrm_fast.models.judge import TINY_JUDGES, is_judge_name
    from vlmrm_fast.models.judge.judge_models import check_model_name

    check_model_name(model, cache_dir)
    if is_judge_name(model):
        from vlmrm_fast.models.judge.judge_models import check_judge_reachable, folder_of

        if model not in TINY_JUDGES and folder_of(model) is None:
            check_judge_reachable(model, cache_dir)
        return
    name, tag = parse_model_name(model, pretrained)
    if name.startswith("hf-hub:"):
        repo_id = name[len("hf-hub:") :]
        both = ('--include "open_clip_*"',)
        for files, what in ((("open_clip_config.json",), "config"), (_HF_WEIGHT_FILES, "weights")):
            _cached_or_reachable(repo_id, files, cache_dir, f"the {name} {what}", name, both)
        return
    pcfg = open_clip.get_pretrained_cfg(name, tag) if tag else {}
    what = f"the {name}/{tag} weights"
    if pcfg.get("hf_hub") and not pcfg.get("file"):
        repo_id, candidates, advice = _hub_source(pcfg["hf_hub"])
        _cached_or_reachable(repo_id, candidates, cache_dir, what, f"{name}/{tag}", advice)
    elif pcfg.get("url") and not pcfg.get("file"):
        target = _url_target(pcfg["url"], cache_dir)
        if not target.is_file() and not network_reachable(pcfg["url"]):
            raise _unavailable(what, str(target.parent), f"{name}/{tag}", f"`curl -L -o {target} {pcfg['url']}`")


def hub_folder(repo_id: str, cache_dir: str | None) -> str:
    """The cache snapshot folder holding the repo's open_clip config and weights."""
    both = ('--include "open_clip_*"',)
    config = _hf_file(
        repo_id, ("open_clip_config.json",), cache_dir, f"the hf-hub:{repo_id} config", f"hf-hub:{repo_id}", both
    )
    weights = _hf_file(repo_id, _HF_WEIGHT_FILES, cache_dir, f"the hf-hub:{repo_id} weights", f"hf-hub:{repo_id}", both)
    if Path(config).parent != Path(weights).parent:
        raise WeightsUnavailableError(
            f"hf-hub:{repo_id}: config and weights are cached under different revisions; re-download both"
        )
    _hub_tokenizer_files(repo_id, Path(config), cache_dir)
    return str(Path(config).parent)


def _hub_tokenizer_files(repo_id: str, config: Path, cache_dir: str | None) -> None:
    """A hub model whose config names a Hugging Face tokenizer is read by open_clip from the model's own
    folder: its tokenizer files go into the same snapshot (cached ones kept)."""
    import json

    from vlmrm_fast.models.clip.tokenizers import download_tokenizer, hub_tokenizer_name

    try:
        model_cfg = json.loads(config.read_text()).get("model_cfg")
    except (OSError, ValueError):
        return  # open_clip reports a broken config itself
    if not hub_tokenizer_name(model_cfg):
        return
    if any((config.parent / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return
    download_tokenizer(repo_id, cache_dir, model_id=f"hf-hub:{repo_id}")
