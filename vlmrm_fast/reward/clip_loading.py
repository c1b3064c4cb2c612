"""Resolving a CLIP model name to an open_clip model with weights, fast offline.

Accepted names: any open_clip architecture (``"ViT-bigG-14"``), ``"name/tag"`` as
in the paper's configs (``"ViT-L-14/laion2b_s32b_b82k"``), ``"hf-hub:org/repo"``,
``"local-dir:/path"``, and ``"vlmrm-tiny"``, a tiny CLIP registered by this
package for tests and smoke runs. Weights come from a pretrained tag (Hugging
Face cache first), a local ``checkpoint`` file, or random initialization.

open_clip retries a missing download for about a minute when there is no
network; here the cache is checked first and the network probed with a short
timeout, so a missing download fails in seconds with what to do about it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import inspect
import logging
import os
import pickle
import socket
import threading
import urllib.parse
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch
from torch.overrides import TorchFunctionMode

from vlmrm_fast.preprocess import PreprocessSpec

TINY_MODEL = "vlmrm-tiny"
MODEL_CONFIG_DIR = Path(__file__).parent / "model_configs"
_HF_WEIGHT_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
_NETWORK_TIMEOUT_S = 3.0
_registered = False


class WeightsUnavailableError(RuntimeError):
    """Pretrained weights are neither cached nor downloadable right now."""


class RandomWeightsWarning(UserWarning):
    """A real architecture was created with random weights (fine for benchmarks, not for rewards)."""


class PromptTruncatedWarning(UserWarning):
    """A prompt is longer than the text encoder's context: its end is cut off."""


def register_builtin_configs() -> None:
    """Registers ``vlmrm-tiny`` (and any config shipped in model_configs/) with open_clip."""
    global _registered
    if not _registered:
        import open_clip

        open_clip.add_model_config(MODEL_CONFIG_DIR)
        _registered = True


@dataclasses.dataclass
class LoadedClip:
    """An open_clip model in eval mode with what the reward model needs beside it."""

    model: Any
    tokenizer: Any
    preprocess: PreprocessSpec
    model_id: str          # as the user named it
    architecture: str      # open_clip config name (or the hub/local id)
    weights: str           # "random init (seed N)", a file path, or a tag
    weights_key: str       # identifies the weights for engine caches

    @property
    def logit_scale(self) -> float:
        return float(self.model.logit_scale.detach().exp().float().item())

    @property
    def embed_dim(self) -> int:
        return int(self.model.visual.output_dim)


def known_models() -> list[str]:
    import open_clip

    register_builtin_configs()
    return open_clip.list_models()


def parse_model_name(model: str, pretrained: str | None) -> tuple[str, str | None]:
    """``"ViT-L-14/laion2b_s32b_b82k"`` -> ``("ViT-L-14", "laion2b_s32b_b82k")``; checks the name."""
    if not isinstance(model, str) or not model.strip():
        raise TypeError(f"model must be a non-empty string such as 'ViT-L-14', got {model!r}")
    model = model.strip()
    if model.startswith(("hf-hub:", "local-dir:")):
        if pretrained is not None:
            raise ValueError(f"pretrained={pretrained!r} cannot be combined with {model!r}: the hub or folder holds the weights")
        return model, None
    models = known_models()
    name, tag = model, pretrained
    if "/" in model and model not in models:
        name, _, embedded = model.partition("/")
        if pretrained is not None and pretrained != embedded:
            raise ValueError(f"model={model!r} names tag {embedded!r} but pretrained={pretrained!r}; give one")
        tag = embedded or None
    if name not in models:
        close = difflib.get_close_matches(name, models, n=5, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown CLIP model {name!r}.{hint} Use an open_clip name (open_clip.list_models()), "
            f"'hf-hub:org/repo', 'local-dir:/path' or {TINY_MODEL!r}."
        )
    return name, tag


def load_clip(
    model: str,
    pretrained: str | None = None,
    *,
    checkpoint: str | os.PathLike | None = None,
    device: torch.device = torch.device("cpu"),
    cache_dir: str | None = None,
    seed: int = 0,
    quick_gelu: bool | None = None,
) -> LoadedClip:
    """Builds the open_clip model named ``model`` with its weights, in eval mode on ``device``."""
    import open_clip

    name, tag = parse_model_name(model, pretrained)
    if checkpoint is not None and tag is not None:
        raise ValueError(f"give either a pretrained tag ({tag!r}) or checkpoint=, not both")

    if name.startswith(("hf-hub:", "local-dir:")):
        folder = _hub_folder(name[len("hf-hub:"):], cache_dir) if name.startswith("hf-hub:") else name[len("local-dir:"):]
        if not Path(folder).is_dir():
            raise FileNotFoundError(f"local-dir {folder!r} does not exist")
        clip = _create(f"local-dir:{folder}", device=device, seed=seed)
        tokenizer = open_clip.get_tokenizer(f"local-dir:{folder}")
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
        weights_file = None
        if tag:
            weights_file = Path(tag) if not pcfg else _pretrained_file(name, tag, pcfg, cache_dir)
        elif checkpoint is not None:
            weights_file = Path(checkpoint)
        clip = _create(name, device=device, seed=seed, quick_gelu=gelu)
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
        if pcfg:
            merged = open_clip.transform.merge_preprocess_dict(open_clip.get_model_preprocess_cfg(clip), pcfg)
            open_clip.set_model_preprocess_cfg(clip, merged)
        tokenizer = open_clip.get_tokenizer(name)
    clip.eval().requires_grad_(False)
    clip.to(device)
    return LoadedClip(
        model=clip,
        tokenizer=tokenizer,
        preprocess=PreprocessSpec.from_open_clip(clip),
        model_id=model if tag is None or "/" in model else f"{model}/{tag}",
        architecture=name,
        weights=weights,
        weights_key=key,
    )


def download_weights(model: str, pretrained: str | None = None, *, cache_dir: str | None = None) -> Path:
    """Fetches a model's pretrained weights into the local cache (or finds them there); returns the path.

    Run once on a machine with network; copy the cache (HF_HUB_CACHE, or ``cache_dir``)
    to machines without it.
    """
    import open_clip

    name, tag = parse_model_name(model, pretrained)
    if name.startswith("hf-hub:"):
        return Path(_hub_folder(name[len("hf-hub:"):], cache_dir))
    if name.startswith("local-dir:"):
        raise ValueError(f"{model!r} is a local folder: nothing to download")
    if not tag:
        tags = open_clip.list_pretrained_tags_by_model(name)
        raise ValueError(f"{name} needs a pretrained tag to download, e.g. {name}/{tags[0]}" if tags else f"{name} has no pretrained weights")
    pcfg = open_clip.get_pretrained_cfg(name, tag)
    if not pcfg:
        raise ValueError(f"pretrained tag {tag!r} is unknown for {name}; known tags: {open_clip.list_pretrained_tags_by_model(name) or 'none'}")
    return _pretrained_file(name, tag, pcfg, cache_dir)


class _LocalGenerator(TorchFunctionMode):
    """Gives every random draw made inside it that names no generator this one instead.

    torch's function-mode stack is per thread, so a model built inside draws its random
    weights from its own generator: the same weights for the same seed whatever other
    threads do meanwhile, and the global generator is neither read nor advanced. Module
    initializers (``nn.init.*``) are caught as they are called: once inside a handler,
    nested calls no longer pass through the mode.
    """

    _TENSOR_DRAWS = frozenset({
        "uniform_", "normal_", "random_", "bernoulli_", "exponential_", "geometric_", "log_normal_", "cauchy_",
        "rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial", "poisson",
        "rand_like", "randn_like", "randint_like",
    })

    def __init__(self, generator: torch.Generator):
        super().__init__()
        self.generator = generator

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if kwargs.get("generator") is None and self._draws(func):
            kwargs = {**kwargs, "generator": self.generator}
        return func(*args, **kwargs)

    @classmethod
    def _draws(cls, func: Any) -> bool:
        if getattr(func, "__module__", None) == "torch.nn.init":
            return "generator" in inspect.signature(func).parameters
        return getattr(func, "__name__", None) in cls._TENSOR_DRAWS


class _QuietRandomInit(logging.Filter):
    """Drops open_clip's "No pretrained weights loaded" record, in the thread building a model only.

    open_clip logs it through the root logger while we load weights next (or warn
    ourselves). Levels stay untouched; the filter is attached once and lets every other
    record (and every record of other threads) through.
    """

    _installed = False
    _lock = threading.Lock()
    _local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not (getattr(self._local, "active", False) and record.getMessage().startswith("No pretrained weights loaded"))

    @classmethod
    @contextlib.contextmanager
    def active(cls):
        with cls._lock:
            if not cls._installed:
                logging.getLogger().addFilter(cls())
                cls._installed = True
        cls._local.active = True
        try:
            yield
        finally:
            cls._local.active = False


def _create(name: str, *, device: torch.device, seed: int, quick_gelu: bool = False):
    import open_clip

    # Random weights (vlmrm-tiny, benchmarks) from a generator of our own: the same for a seed in any
    # process or thread, and the global torch generator untouched.
    with _QuietRandomInit.active(), _LocalGenerator(torch.Generator().manual_seed(seed)):
        return open_clip.create_model(name, pretrained=None, force_quick_gelu=quick_gelu, device="cpu")


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
    shape_error = isinstance(exc, RuntimeError) and ("size mismatch" in text or "Missing key" in text or "Unexpected key" in text)
    if shape_error or isinstance(exc, AssertionError):  # open_clip asserts when resizing position embeddings
        first = next((line.strip() for line in text.splitlines() if "size mismatch" in line or "Missing key" in line or "Unexpected key" in line), text)
        return (
            f"{head}: it holds weights of another architecture ({first[:200] or type(exc).__name__}). "
            f"Name the model it was saved from (model=...), or give weights saved from {model_name}"
        )
    detail = text.split("WeightsUnpickler error:", 1)[1].strip().split("\n\n")[0].strip() if "WeightsUnpickler error:" in text else ""
    if "Unsupported global" in detail:
        return (
            f"{head}: it holds pickled Python objects ({detail.split(' was not')[0]}), not only tensors, and is not "
            f"run as code. If you trust its source, load it in your own code and save the weights alone: "
            f"torch.save(model.state_dict(), 'weights.pt')"
        )
    if detail or isinstance(exc, (pickle.UnpicklingError, EOFError)) or "zip" in text.lower() or "safetensor" in text.lower():
        return (
            f"{head}: it is not a readable weights file ({path.stat().st_size} bytes), neither a whole torch.save "
            f"state dict nor a safetensors file ({detail or _first_line(text)}). It may be damaged or cut short: "
            f"download or copy it again"
        )
    return f"{head}: {type(exc).__name__}: {_first_line(text)}"


def _first_line(text: str) -> str:
    """The first sentence of an error text (torch's run on with advice after it)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line.split(". ")[0][:300]


def check_prompt_lengths(tokenizer: Any, prompts: Sequence[str]) -> None:
    """Warns, naming the prompt, when the tokenizer will cut it to its context length."""
    context = getattr(tokenizer, "context_length", None)
    if not context:
        return
    for prompt in prompts:
        tokens = _token_count(tokenizer, prompt)
        if tokens is not None and tokens > context:
            warnings.warn(
                f"prompt {prompt!r} is {tokens} tokens long (with start and end tokens); the text encoder reads "
                f"{context}, so the last {tokens - context} are dropped. Shorten the prompt.",
                PromptTruncatedWarning,
                stacklevel=3,
            )


def _token_count(tokenizer: Any, prompt: str) -> int | None:
    """Tokens of ``prompt`` including start and end tokens, before any truncation (None if unknown)."""
    encode = getattr(tokenizer, "encode", None)
    if callable(encode) and hasattr(tokenizer, "sot_token_id"):  # open_clip's SimpleTokenizer
        return len(encode(prompt)) + 2
    hf = getattr(tokenizer, "tokenizer", None)  # open_clip's HFTokenizer wraps a transformers tokenizer
    if hf is not None and callable(hf):
        try:
            return len(hf(prompt, truncation=False)["input_ids"])
        except Exception:
            return None
    return None


def _file_key(path: str | os.PathLike) -> str:
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return str(p)
    return f"{p.resolve()}:{st.st_size}:{int(st.st_mtime)}"


# ----------------------------------------------------------------------------- downloads


def _hf_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def _offline_env() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def network_reachable(url: str, timeout: float = _NETWORK_TIMEOUT_S) -> bool:
    """True when a TCP connection to ``url``'s host opens within ``timeout`` (DNS included)."""
    parsed = urllib.parse.urlparse(url)
    host = parsed.hostname or ""
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    result = {"ok": False}

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result["ok"] = True
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)  # getaddrinfo ignores socket timeouts
    thread.start()
    thread.join(timeout + 0.5)
    return result["ok"]


def _unavailable(what: str, where: str, model_id: str, source: str) -> WeightsUnavailableError:
    """``source``: the command that fetches the file by hand (``hf download REPO FILE``, or a URL)."""
    reason = "HF_HUB_OFFLINE is set" if _offline_env() else f"{_hf_endpoint()} is unreachable"
    return WeightsUnavailableError(
        f"{what}: not in the local cache ({where}) and {reason}. On a machine with network run "
        f"`vlmrm-fast download {model_id}` (or {source}), then copy the cache folder here (or point HF_HUB_CACHE "
        f"at it); or use a local weights file (checkpoint='/path/to/weights', reward.checkpoint in a training config)."
    )


def _cached_hf_file(repo_id: str, filenames: tuple[str, ...], cache_dir: str | None) -> str | None:
    from huggingface_hub import try_to_load_from_cache

    for filename in filenames:
        hit = try_to_load_from_cache(repo_id, filename, cache_dir=cache_dir)
        if isinstance(hit, str):
            return hit
    return None


def _hf_file(repo_id: str, filenames: tuple[str, ...], cache_dir: str | None, what: str, model_id: str, advice_files: tuple[str, ...] = ()) -> str:
    """The cached file, else a download (with progress) when the hub answers, else a clear error."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.constants import HF_HUB_CACHE

    hit = _cached_hf_file(repo_id, filenames, cache_dir)
    if hit:
        return hit
    if _offline_env() or not network_reachable(_hf_endpoint()):
        cache_option = f" --cache-dir {cache_dir}" if cache_dir else ""
        files = " ".join(advice_files or filenames[-1:])
        raise _unavailable(what, cache_dir or HF_HUB_CACHE, model_id, f"`hf download {repo_id} {files}{cache_option}`")
    errors = []
    for filename in filenames:
        try:
            return hf_hub_download(repo_id, filename, cache_dir=cache_dir)
        except Exception as exc:  # EntryNotFound for the alternative name, HTTP errors
            errors.append(f"{filename}: {exc}")
    raise WeightsUnavailableError(f"could not download {what} from {repo_id}: " + "; ".join(errors))


def _pretrained_file(name: str, tag: str, pcfg: dict, cache_dir: str | None) -> Path:
    what = f"the {name}/{tag} weights"
    if pcfg.get("file"):
        return Path(pcfg["file"])
    hub = pcfg.get("hf_hub", "")
    if hub:
        advice: tuple[str, ...] = ()
        if hub.endswith("/"):
            repo_id, candidates = hub.rstrip("/"), _HF_WEIGHT_FILES
            advice = ('--include "open_clip_*"',)  # the repo's weights in whichever format it holds
        else:
            repo_id, filename = os.path.split(hub)
            safe = os.path.splitext(filename)[0] + ".safetensors"
            candidates = (filename,) if filename == safe else (safe, filename)
        return Path(_hf_file(repo_id, candidates, cache_dir, what, f"{name}/{tag}", advice))
    url = pcfg.get("url", "")
    if not url:
        raise WeightsUnavailableError(f"{what}: the pretrained config names no file, hub repo or URL")
    import open_clip

    target = Path(cache_dir or os.path.expanduser("~/.cache/clip")) / os.path.basename(url)
    if target.is_file():
        return target
    if not network_reachable(url):
        raise _unavailable(what, str(target.parent), f"{name}/{tag}", f"`curl -L -o {target} {url}`")
    return Path(open_clip.pretrained.download_pretrained_from_url(url, cache_dir=cache_dir))


def _hub_folder(repo_id: str, cache_dir: str | None) -> str:
    """The cache snapshot folder holding the repo's open_clip config and weights."""
    both = ('--include "open_clip_*"',)
    config = _hf_file(repo_id, ("open_clip_config.json",), cache_dir, f"the hf-hub:{repo_id} config", f"hf-hub:{repo_id}", both)
    weights = _hf_file(repo_id, _HF_WEIGHT_FILES, cache_dir, f"the hf-hub:{repo_id} weights", f"hf-hub:{repo_id}", both)
    if Path(config).parent != Path(weights).parent:
        raise WeightsUnavailableError(
            f"hf-hub:{repo_id}: config and weights are cached under different revisions; re-download both"
        )
    return str(Path(config).parent)
