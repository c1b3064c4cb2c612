"""Models by name, one package per family of models: ``clip/`` (open_clip's CLIPs, the frame models),
``judge/`` (generative VLM judges through transformers), ``video/`` (video-language models), and what
they all share here:

    errors.py       WeightsUnavailableError and MissingDependencyError, raised by every way of fetching a model
    hub.py          the Hugging Face cache and hub: probing, downloading, what to do offline
    network.py      whether the hub can be reached now
    random_init.py  random weights from a thread-local generator
"""

from vlmrm_fast.models.errors import MissingDependencyError, WeightsUnavailableError
from vlmrm_fast.models.hub import cached_hf_file, download_model, download_weights, require_weights
from vlmrm_fast.models.network import network_reachable
from vlmrm_fast.models.random_init import RandomWeightsWarning

__all__ = [
    "MissingDependencyError",
    "RandomWeightsWarning",
    "WeightsUnavailableError",
    "cached_hf_file",
    "download_model",
    "download_weights",
    "network_reachable",
    "require_weights",
]
