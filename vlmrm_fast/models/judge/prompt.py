"""A question's prompt, built as the model's own authors build it, and split where the frames enter it.

One place builds a prompt: :func:`prompt_inputs` hands one user turn (the frames and the question, in the
order asked) to the processor's ``apply_chat_template`` with the generation prompt, ``tokenize=True``:
the model's chat template, its processor's image tokens for the judge's input size, and its tokenizer's
start token (BOS) exactly once. (Rendering the template to text and tokenizing that again, as the
processor does when called on text, adds the tokenizer's BOS a second time where the template writes it
too: Idefics3's ``<|begin_of_text|>``. transformers' ``apply_chat_template`` leaves it out.)

``prompt_order`` (:data:`PROMPT_ORDERS`): ``image_first`` (the default) is how the models' cards, Qwen's
examples and TOPReward ask: the frame, then the question. ``question_first`` puts the question before the
frame, which makes it part of the frame-independent start of the prompt.

The :class:`PromptLayout` of a prompt marks where the frames' tokens start and end. Everything before the
first image token does not depend on the frames: its keys and values are computed once. Prompts that
agree up to the end of the frames' tokens (every question of a set, image first) share one pass over
the frames' tokens per batch, after which each question's own tokens run (:func:`share_frames`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vlmrm_fast.checks import FieldError

#: How a question and its frames are laid out in the user's turn.
PROMPT_ORDERS = ("image_first", "question_first")
#: The models' own order: the frame, then the question.
DEFAULT_PROMPT_ORDER = "image_first"


@dataclasses.dataclass(frozen=True)
class PromptLayout:
    """One question's prompt for one input size: ``ids`` (1, L) token ids; ``positions`` the positions of
    the whole prompt (Qwen's (3, 1, L) multimodal ones) or None (the token index); the frames' tokens are
    ``ids[:, frames_start:frames_end]`` (the first image token to the last one, with the markers between)."""

    ids: torch.Tensor
    positions: torch.Tensor | None
    frames_start: int
    frames_end: int

    @property
    def length(self) -> int:
        return self.ids.shape[1]


def messages(question: str, order: str, images: Sequence[Any]) -> list[dict[str, Any]]:
    """One user turn of ``images`` (transformers' content items: an image, or None for a placeholder that
    only renders) and ``question``, in ``order``."""
    if order not in PROMPT_ORDERS:
        raise FieldError("prompt_order", f"{order!r} is not one of {', '.join(PROMPT_ORDERS)}")
    pictures = [{"type": "image"} if image is None else {"type": "image", "image": image} for image in images]
    text = [{"type": "text", "text": question}]
    return [{"role": "user", "content": pictures + text if order == "image_first" else text + pictures}]


def prompt_inputs(processor: Any, question: str, order: str, frames: Sequence[np.ndarray]) -> dict[str, torch.Tensor]:
    """The model's inputs for ``question`` about uint8 (H, W, 3) ``frames``, as a transformers user makes them:
    the processor's ``apply_chat_template`` with the generation prompt, ``tokenize=True``."""
    from PIL import Image

    turn = messages(question, order, [Image.fromarray(frame) for frame in frames])
    inputs = processor.apply_chat_template(
        turn, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    return dict(inputs)


def generation_prompt(processor: Any, order: str) -> str:
    """What the chat template writes after the user's turn for the answer (``<|im_start|>assistant\\n``,
    ``Assistant:``)."""
    turn = messages("Q", order, [None])
    without = processor.apply_chat_template(turn, add_generation_prompt=False, tokenize=False)
    with_prompt = processor.apply_chat_template(turn, add_generation_prompt=True, tokenize=False)
    return with_prompt[len(without) :] if with_prompt.startswith(without) else with_prompt


def check_answer_position(processor: Any, order: str, model_id: str) -> None:
    """Refuses a model whose generation prompt opens a thinking block (a Qwen3-VL "Thinking" model's ends in
    ``<think>``): such a model writes its reasoning first and its answer after ``</think>``, so the next
    token's logits are not the answer's."""
    prompt = generation_prompt(processor, order)
    if "<think>" in prompt and "</think>" not in prompt.split("<think>")[-1]:
        instruct = model_id.replace("Thinking", "Instruct") if "Thinking" in model_id else None
        use = (
            f"its Instruct version ({instruct!r})"
            if instruct
            else "an Instruct model (e.g. 'Qwen/Qwen3-VL-2B-Instruct')"
        )
        raise FieldError(
            "model",
            f"{model_id}'s chat template opens a thinking block where the answer would come ({prompt!r}): a thinking "
            f"model writes its reasoning before its answer, which a judge does not generate, so the yes/no logits would "
            f"be read at the wrong position; use {use}",
        )


def layout_prompt(
    processor: Any,
    adapter: Any,
    image_token_id: int,
    question: str,
    *,
    order: str = DEFAULT_PROMPT_ORDER,
    frames: int = 1,
    context: int | None,
    field: str,
) -> PromptLayout:
    """The layout of ``question`` about ``frames`` frames of ``adapter``'s input size, in ``order``; one line
    naming the fix when prompt and frames do not fit the model's ``context`` (``field`` names the question)."""
    blank = np.zeros((*adapter.image_size, 3), dtype=np.uint8)
    inputs = prompt_inputs(processor, question, order, [blank] * frames)
    ids = inputs["input_ids"]
    image_positions = (ids[0] == image_token_id).nonzero()
    if image_positions.numel() == 0:
        raise ValueError(f"the chat template of this model put no image token in the prompt of {question!r}")
    length = ids.shape[1]
    if context is not None and length > context:
        h, w = adapter.image_size
        raise FieldError(
            field,
            f"the prompt with the image is {length} tokens ({image_positions.numel()} of them the image's at "
            f"{h}x{w}), over the model's context of {context}: shorten the question, or score smaller frames "
            f"(image_size)",
        )
    positions = adapter.positions(inputs)
    return PromptLayout(ids, positions, int(image_positions[0, 0]), int(image_positions[-1, 0]) + 1)


@dataclasses.dataclass(frozen=True)
class SharedFrames:
    """Prompts (``members``, indices of the layouts) equal up to the end of the frames' tokens: ``ids[:, :head]``
    holds no frame (computed once), ``ids[:, head:shared]`` runs once per batch of frames for all members,
    each member's ``ids[:, shared:]`` after it (nothing, for a prompt alone: its pass over the frames ends
    at its answer)."""

    members: tuple[int, ...]
    head: int
    shared: int


def share_frames(layouts: Sequence[PromptLayout], *, cache_head: bool = True) -> list[SharedFrames]:
    """The layouts grouped by what they share (see :class:`SharedFrames`), in the order of their first
    member; ``cache_head`` False: nothing is computed ahead of the frames (every token runs per batch)."""
    groups: dict[bytes, list[int]] = {}
    for i, layout in enumerate(layouts):
        key = layout.ids[0, : layout.frames_end].numpy().tobytes()
        groups.setdefault(key, []).append(i)
    out = []
    for members in groups.values():
        first = layouts[members[0]]
        head = first.frames_start if cache_head else 0
        if len(members) == 1:
            shared = first.length
        else:
            shortest = min(layouts[i].length for i in members)
            common = next(
                (
                    t
                    for t in range(first.frames_end, shortest)
                    if any(int(layouts[i].ids[0, t]) != int(first.ids[0, t]) for i in members)
                ),
                shortest,
            )
            shared = min(common, shortest - 1)  # every member keeps at least its last token
        out.append(SharedFrames(tuple(members), head, shared))
    return out


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
