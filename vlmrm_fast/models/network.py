"""Whether the Hugging Face hub can be reached: its address, the offline switch, a quick TCP probe.
Shared by the weights (hub.py) and the tokenizers (tokenizers.py)."""

from __future__ import annotations

import os
import socket
import threading
import urllib.parse

_NETWORK_TIMEOUT_S = 3.0


def hf_endpoint() -> str:
    """The Hugging Face hub's address (``HF_ENDPOINT``, as huggingface_hub reads it)."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for no network."""
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
