"""CLIP models by name, with weights, fast offline.

Accepted names: any open_clip architecture (``"ViT-bigG-14"``), ``"name/tag"`` as in the
paper's configs (``"ViT-L-14/laion2b_s32b_b82k"``), ``"hf-hub:org/repo"``,
``"local-dir:/path"``, and ``"vlmrm-tiny"``, a tiny CLIP registered by this package for tests
and smoke runs. Weights come from a pretrained tag (Hugging Face cache first), a local
``checkpoint`` file, or random initialization.

    names.py        the accepted forms, the registered configs (model_configs/, register_model_config)
    families.py     the families (SigLIP, PE, EVA, MobileCLIP, ...), their optional packages, FLOPs
                    (model_table.json, written by tools/generate_model_table.py)
    tokenizers.py   hub tokenizers (SigLIP) from a folder or the cache, offline
    clip_models.py  load_clip: a CLIP by name, its weights and checkpoints
    prompts.py      prompts against the text context length
    listing.py      ``vlmrm-fast models``: the families and their sizes
    export.py       ``vlmrm-fast export``: a model's image tower as a TensorRT engine or ONNX file

What every model family shares (the Hugging Face cache and hub, the errors, random weights) is one level up,
in ``vlmrm_fast.models``.
"""

from vlmrm_fast.models.clip.clip_models import LoadedClip, load_clip
from vlmrm_fast.models.clip.families import FAMILIES, Family, family_of
from vlmrm_fast.models.clip.names import (
    MODEL_CONFIG_DIR,
    TINY_MODEL,
    known_models,
    parse_model_name,
    register_builtin_configs,
    register_model_config,
)
from vlmrm_fast.models.clip.prompts import PromptTruncatedWarning, check_prompt_lengths
from vlmrm_fast.models.clip.tokenizers import TokenizerUnavailableError

__all__ = [
    "FAMILIES",
    "MODEL_CONFIG_DIR",
    "TINY_MODEL",
    "Family",
    "LoadedClip",
    "PromptTruncatedWarning",
    "TokenizerUnavailableError",
    "check_prompt_lengths",
    "family_of",
    "known_models",
    "load_clip",
    "parse_model_name",
    "register_builtin_configs",
    "register_model_config",
]
