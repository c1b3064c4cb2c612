"""Tokenizers of models whose tokenizer lives on the Hugging Face hub (SigLIP, SigLIP2), fast offline.

open_clip builds such a tokenizer with ``transformers.AutoTokenizer.from_pretrained(repo)``, which
reaches for the hub. Here the order is: a folder the user gives (``tokenizer="/path"``), else the
local Hugging Face cache, else a download when the hub answers, else one line that names the fix
(``vlmrm-fast download MODEL`` fetches the tokenizer along with the weights). Models with
open_clip's own BPE tokenizer (its vocabulary ships inside open_clip) need none of this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vlmrm_fast.failures import ExpectedFailure
from vlmrm_fast.models.clip.families import check_requirements, missing_dependency
from vlmrm_fast.models.errors import installed
from vlmrm_fast.models.network import hf_endpoint, hub_offline, network_reachable

#: The files a Hugging Face tokenizer is made of (whichever of them a repo has).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "*.model",
    "vocab.*",
    "merges.txt",
    "config.json",
)


class TokenizerUnavailableError(ExpectedFailure, OSError):
    """A hub tokenizer is neither in the given folder, nor cached, nor downloadable now."""


def hub_tokenizer_name(config: dict[str, Any] | None) -> str | None:
    """The Hugging Face repo of an architecture's tokenizer, None for open_clip's own tokenizer."""
    return ((config or {}).get("text_cfg") or {}).get("hf_tokenizer_name") or None


def _tokenizer_kwargs(text_cfg: dict[str, Any]) -> dict[str, Any]:
    return {
        "context_length": text_cfg.get("context_length", 77),
        "tokenizer_mode": text_cfg.get("tokenizer_mode"),
        **(text_cfg.get("tokenizer_kwargs") or {}),
    }


def load_tokenizer(
    name: str, *, model_id: str, tokenizer: str | None = None, cache_dir: str | None = None, config: Any = None
) -> Any:
    """The tokenizer of the open_clip architecture ``name`` (``config``: its open_clip config).

    ``tokenizer``: a folder holding a Hugging Face tokenizer (``save_pretrained``'s or
    ``hf download REPO``'s files), used instead of the hub repo the config names.
    """
    import open_clip

    from vlmrm_fast.models.clip.families import model_config

    config = config if config is not None else model_config(name)
    repo = hub_tokenizer_name(config)
    if repo is None:
        if tokenizer is not None:
            raise ValueError(
                f"tokenizer={tokenizer!r}: {model_id} uses open_clip's own tokenizer (shipped with open_clip); "
                "a tokenizer folder is for models whose tokenizer lives on the Hugging Face hub (SigLIP)"
            )
        return open_clip.get_tokenizer(name)
    check_requirements(model_id, config)
    from open_clip.tokenizer import HFTokenizer

    kwargs = _tokenizer_kwargs(config["text_cfg"])
    if tokenizer is not None:
        folder = Path(tokenizer).expanduser()
        if not folder.is_dir():
            raise TokenizerUnavailableError(
                f"tokenizer folder {str(folder)!r} does not exist: give the folder holding the files of {repo} "
                f"(`hf download {repo} --local-dir DIR` writes them)"
            )
        try:
            return HFTokenizer(str(folder), local_files_only=True, **kwargs)
        except (OSError, ValueError, KeyError) as exc:
            raise TokenizerUnavailableError(
                f"tokenizer folder {str(folder)!r} holds no tokenizer transformers can read ({_first_line(exc)}); "
                f"it needs tokenizer.json or tokenizer_config.json with its vocabulary, as `save_pretrained` or "
                f"`hf download {repo} --local-dir DIR` writes them"
            ) from exc
    try:
        return HFTokenizer(repo, cache_dir=cache_dir, local_files_only=True, **kwargs)
    except (OSError, ValueError):
        pass  # not cached
    download_tokenizer(repo, cache_dir, model_id=model_id)
    return HFTokenizer(repo, cache_dir=cache_dir, local_files_only=True, **kwargs)


def download_tokenizer(repo: str, cache_dir: str | None, *, model_id: str) -> Path:
    """The tokenizer files of ``repo`` into the Hugging Face cache (cached files are kept); returns
    their folder. Offline or unreachable: :class:`TokenizerUnavailableError` naming the fix."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.constants import HF_HUB_CACHE

    if not installed("transformers"):
        raise missing_dependency(model_id, "transformers", f"its tokenizer is the Hugging Face tokenizer {repo}")
    if hub_offline() or not network_reachable(hf_endpoint()):
        reason = "HF_HUB_OFFLINE is set" if hub_offline() else f"{hf_endpoint()} is unreachable"
        return_hint = f" --cache-dir {cache_dir}" if cache_dir else ""
        raise TokenizerUnavailableError(
            f"the tokenizer of {model_id} ({repo}) is not in the local cache ({cache_dir or HF_HUB_CACHE}) and "
            f"{reason}. On a machine with network run `vlmrm-fast download {_downloadable(model_id)}{return_hint}` (it fetches "
            f"the tokenizer with the weights) and copy the cache here, or give a tokenizer folder "
            f"(tokenizer='/path', reward.tokenizer in a training config)"
        )
    return Path(snapshot_download(repo, cache_dir=cache_dir, allow_patterns=list(TOKENIZER_FILES)))


def _downloadable(model_id: str) -> str:
    """``model_id`` as `vlmrm-fast download` takes it: with a pretrained tag (the first one) if it has none."""
    if "/" in model_id or model_id.startswith(("hf-hub:", "local-dir:")):
        return model_id
    import open_clip

    tags = open_clip.list_pretrained_tags_by_model(model_id)
    return f"{model_id}/{tags[0]}" if tags else model_id


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]
