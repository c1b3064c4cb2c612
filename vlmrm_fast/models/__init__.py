"""CLIP models by name, with weights, fast offline.

Accepted names: any open_clip architecture (``"ViT-bigG-14"``), ``"name/tag"`` as in the
paper's configs (``"ViT-L-14/laion2b_s32b_b82k"``), ``"hf-hub:org/repo"``,
``"local-dir:/path"``, and ``"vlmrm-tiny"``, a tiny CLIP registered by this package for tests
and smoke runs. Weights come from a pretrained tag (Hugging Face cache first), a local
``checkpoint`` file, or random initialization.

    names.py        the accepted forms, the registered configs (model_configs/, register_model_config)
    families.py     the families (SigLIP, PE, EVA, MobileCLIP, ...), their optional packages, FLOPs
    tokenizers.py   hub tokenizers (SigLIP) from a folder or the cache, offline
    errors.py       WeightsUnavailableError, raised by every way of fetching weights
    hub.py          the Hugging Face cache and hub: probing, downloading, what to do offline
    random_init.py  random weights from a thread-local generator
    load.py         load_clip, checkpoints
    prompts.py      prompts against the text context length
    export.py       ``vlmrm-fast export``: a model's image tower as a TensorRT engine or ONNX file
"""

from vlmrm_fast.models.errors import WeightsUnavailableError
from vlmrm_fast.models.families import FAMILIES, Family, MissingDependencyError, family_of
from vlmrm_fast.models.hub import (
    cached_hf_file,
    download_model,
    download_weights,
    require_weights,
)
from vlmrm_fast.models.load import LoadedClip, load_clip
from vlmrm_fast.models.names import (
    MODEL_CONFIG_DIR,
    TINY_MODEL,
    known_models,
    parse_model_name,
    register_builtin_configs,
    register_model_config,
)
from vlmrm_fast.models.network import network_reachable
from vlmrm_fast.models.prompts import PromptTruncatedWarning, check_prompt_lengths
from vlmrm_fast.models.random_init import RandomWeightsWarning
from vlmrm_fast.models.tokenizers import TokenizerUnavailableError

__all__ = [
    "FAMILIES",
    "MODEL_CONFIG_DIR",
    "TINY_MODEL",
    "Family",
    "LoadedClip",
    "MissingDependencyError",
    "PromptTruncatedWarning",
    "RandomWeightsWarning",
    "TokenizerUnavailableError",
    "WeightsUnavailableError",
    "cached_hf_file",
    "check_prompt_lengths",
    "download_model",
    "download_weights",
    "family_of",
    "known_models",
    "load_clip",
    "network_reachable",
    "parse_model_name",
    "register_builtin_configs",
    "register_model_config",
    "require_weights",
]
