"""A question's prompt, split where the frame enters it.

The model's own chat template lays out one user turn holding the question and then the image, and the
generation prompt after it (``<|im_start|>assistant\\n``, ``Assistant:``); the model's processor expands
the image into its tokens for the judge's input size. Everything before the first image token does not
depend on the frame: that is the *prefix*, run once per question into a KV cache. The rest, the *tail*
(the image tokens, any markers between them, the end of the turn and the generation prompt), is run for
every frame from the cached prefix; the answer word's logits are read at its last position. Where a
template puts the image first whatever the content's order, the prefix is shorter and the question moves
into the tail: the rewards are the same, each frame costs more.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from vlmrm_fast.checks import FieldError


@dataclasses.dataclass(frozen=True)
class PromptLayout:
    """One question's prompt for one input size: ``prefix`` (1, P) and ``tail`` (1, T) token ids; the
    positions (Qwen's (3, 1, P + T) multimodal ones) of the whole prompt or None (the token index)."""

    text: str
    prefix: torch.Tensor
    tail: torch.Tensor
    positions: torch.Tensor | None

    @property
    def length(self) -> int:
        return self.prefix.shape[1] + self.tail.shape[1]


def chat_text(processor: Any, question: str) -> str:
    """The prompt text of ``question`` about one image, question first, with the generation prompt."""
    messages = [{"role": "user", "content": [{"type": "text", "text": question}, {"type": "image"}]}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def processor_inputs(processor: Any, text: str, image: np.ndarray) -> dict[str, torch.Tensor]:
    """The processor's inputs for ``text`` with one uint8 (H, W, 3) ``image`` (the reference path)."""
    from PIL import Image

    return dict(processor(text=[text], images=[[Image.fromarray(image)]], return_tensors="pt"))


def layout_prompt(
    processor: Any,
    adapter: Any,
    image_token_id: int,
    question: str,
    *,
    context: int | None,
    field: str,
) -> PromptLayout:
    """The layout of ``question`` for ``adapter``'s input size; one line naming the fix when prompt and
    image do not fit the model's ``context`` (``field`` names the question in that line)."""
    text = chat_text(processor, question)
    blank = np.zeros((*adapter.image_size, 3), dtype=np.uint8)
    inputs = processor_inputs(processor, text, blank)
    ids = inputs["input_ids"]
    image_positions = (ids[0] == image_token_id).nonzero()
    if image_positions.numel() == 0:
        raise ValueError(f"the chat template of this model put no image token in the prompt {text!r}")
    length = ids.shape[1]
    if context is not None and length > context:
        h, w = adapter.image_size
        raise FieldError(
            field,
            f"the prompt with the image is {length} tokens ({image_positions.numel()} of them the image's at "
            f"{h}x{w}), over the model's context of {context}: shorten the question, or score smaller frames "
            f"(image_size)",
        )
    start = int(image_positions[0, 0])
    positions = adapter.positions(inputs)
    return PromptLayout(text, ids[:, :start], ids[:, start:], positions)


def answer_token(tokenizer: Any, word: str, lead: str, field: str) -> int:
    """The id of answer ``word`` as the model would write it after the prompt (``lead`` first: a space
    where the template leaves one); refuses a word of several tokens, naming the split."""
    ids = tokenizer(lead + word, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        raise FieldError(
            field,
            f"{word!r} is {len(ids)} tokens for this model's tokenizer ({' + '.join(map(repr, pieces))}); an "
            f"answer must be one token: choose another word (e.g. 'Yes'/'No', 'True'/'False')",
        )
    return int(ids[0])
