"""Prompts against the text encoder's context length: a warning names what a cut drops."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any


class PromptTruncatedWarning(UserWarning):
    """A prompt is longer than the text encoder's context: its end is cut off."""


def check_prompt_lengths(tokenizer: Any, prompts: Sequence[str]) -> None:
    """Warns, naming the prompt, when the tokenizer will cut it to its context length."""
    context = getattr(tokenizer, "context_length", None)
    if not context:
        return
    for prompt in prompts:
        tokens = _token_count(tokenizer, prompt)
        if tokens is not None and tokens > context:
            warnings.warn(
                f"prompt {_quoted(prompt)} is {tokens} tokens long (with start and end tokens); the text encoder reads "
                f"{context}, so the last {tokens - context} are dropped. Shorten the prompt.",
                PromptTruncatedWarning,
                stacklevel=3,
            )


#: The most characters of a prompt a warning quotes: a 10,000-character prompt stays a line a terminal shows.
QUOTED_CHARACTERS = 80


def _quoted(prompt: str) -> str:
    """The prompt in quotes, its middle left out when it is long (and its length said)."""
    if len(prompt) <= QUOTED_CHARACTERS:
        return repr(prompt)
    head, tail = prompt[: QUOTED_CHARACTERS - 24], prompt[-16:]
    return f"{head + ' ... ' + tail!r} ({len(prompt):,} characters)"


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
