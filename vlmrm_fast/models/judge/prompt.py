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
    inputs: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @property
    def length(self) -> int:
        return self.ids.shape[1]


def messages(question: str, order: str, images: Sequence[Any], *, video: bool = False) -> list[dict[str, Any]]:
    """One user turn of ``images`` (transformers' content items: an image, or None for a placeholder that
    only renders) and ``question``, in ``order``; ``video``: the images are the frames of one video item."""
    if order not in PROMPT_ORDERS:
        raise FieldError("prompt_order", f"{order!r} is not one of {', '.join(PROMPT_ORDERS)}")
    if video:
        pictures = [{"type": "video", "video": list(images)}]
    else:
        pictures = [{"type": "image"} if image is None else {"type": "image", "image": image} for image in images]
    text = [{"type": "text", "text": question}]
    return [{"role": "user", "content": pictures + text if order == "image_first" else text + pictures}]


#: A video's frames are the ones given: the processor samples none of them out (its ``fps`` sampling is for
#: decoded video files; a window's frames were chosen by the window).
VIDEO_OPTIONS = {"do_sample_frames": False}


def prompt_inputs(
    processor: Any, question: str, order: str, frames: Sequence[np.ndarray], *, video: bool = False
) -> dict[str, torch.Tensor]:
    """The model's inputs for ``question`` about uint8 (H, W, 3) ``frames``, as a transformers user makes them:
    the processor's ``apply_chat_template`` with the generation prompt, ``tokenize=True``; each frame an image,
    or with ``video`` the frames of one video (:data:`VIDEO_OPTIONS`)."""
    from PIL import Image

    if video:
        turn = messages(question, order, [np.ascontiguousarray(frame) for frame in frames], video=True)
    else:
        turn = messages(question, order, [Image.fromarray(frame) for frame in frames])
    inputs = processor.apply_chat_template(
        turn,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        processor_kwargs=VIDEO_OPTIONS if video else {},
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
    video: bool = False,
    context: int | None,
    field: str,
) -> PromptLayout:
    """The layout of ``question`` about ``frames`` frames of ``adapter``'s input size, in ``order`` (each frame an
    image, or with ``video`` the frames of one video, whose tokens are then ``image_token_id``: the model's video
    token); one line naming the fix when prompt and frames do not fit the model's ``context`` (``field`` names the
    question)."""
    inputs = blank_inputs(processor, adapter, question, order, frames, video=video)
    ids = inputs["input_ids"]
    image_positions = (ids[0] == image_token_id).nonzero()
    if image_positions.numel() == 0:
        raise ValueError(f"the chat template of this model put no image token in the prompt of {question!r}")
    length = ids.shape[1]
    if context is not None and length > context:
        h, w = adapter.image_size
        what = "image" if frames == 1 else f"{frames} frames"
        raise FieldError(
            field,
            f"the prompt with the {what} is {length} tokens ({image_positions.numel()} of them the {what}'s at "
            f"{h}x{w}), over the model's context of {context}: shorten the question, or score smaller frames "
            f"(image_size)" + (" or fewer of them" if frames > 1 else ""),
        )
    positions = adapter.positions(inputs)
    return PromptLayout(ids, positions, int(image_positions[0, 0]), int(image_positions[-1, 0]) + 1, inputs)


def blank_inputs(
    processor: Any, adapter: Any, question: str, order: str, frames: int, *, video: bool = False
) -> dict[str, torch.Tensor]:
    """The processor's inputs for ``question`` about ``frames`` blank frames of ``adapter``'s input size: the ids and
    grids of a prompt, whose frames' tokens do not depend on what the frames show."""
    blank = np.zeros((*adapter.image_size, 3), dtype=np.uint8)
    return prompt_inputs(processor, question, order, [blank] * frames, video=video)


@dataclasses.dataclass(frozen=True)
class FrameSequence:
    """A question's prompt about any number ``n`` of frames, each an image, as the model's chat template lays it
    out: ``head + block x n + tail``. The head holds no frame (the template's start, and the question where it
    comes first); each block is one frame's tokens with the markers the template puts around them; the tail is
    what follows the last frame (the question where it comes after, the end of the turn, the generation prompt).

    Positions are ``(P, length)``: Qwen's multimodal ones (P = 3) or the token index (P = 1). A block's positions
    are the first block's moved by ``advance`` per block before it, and the tail's are those after one block moved
    by ``advance`` per block more (a test checks both against the model's own ``get_rope_index`` over the
    template's prompt of several frames)."""

    head: torch.Tensor  # (a,) token ids
    block: torch.Tensor  # (u,)
    tail: torch.Tensor  # (c,)
    head_positions: torch.Tensor  # (P, a)
    block_positions: torch.Tensor  # (P, u), the first block's
    tail_positions: torch.Tensor  # (P, c), after one block
    advance: int
    multimodal_positions: bool  # Qwen's (3, batch, length) positions; else the token index (batch, length)

    def ids(self, frames: int) -> torch.Tensor:
        """The token ids (1, L) of the prompt about ``frames`` frames."""
        return torch.cat([self.head, self.block.repeat(frames), self.tail])[None]

    def block_positions_at(self, index: torch.Tensor) -> torch.Tensor:
        """The positions (P, B, u) of block ``index`` (B,) (0: the first frame's)."""
        return self.block_positions[:, None, :] + self.advance * index.view(1, -1, 1)

    def tail_positions_after(self, frames: torch.Tensor) -> torch.Tensor:
        """The positions (P, B, c) of the tail after ``frames`` (B,) blocks."""
        return self.tail_positions[:, None, :] + self.advance * (frames.view(1, -1, 1) - 1)

    def positions(self, frames: int) -> torch.Tensor:
        """The positions (P, 1, L) of the prompt about ``frames`` frames."""
        blocks = [self.block_positions_at(torch.tensor([k]))[:, 0] for k in range(frames)]
        tail = self.tail_positions_after(torch.tensor([frames]))[:, 0]
        return torch.cat([self.head_positions, *blocks, tail], dim=1)[:, None]

    def length(self, frames: int) -> int:
        return len(self.head) + frames * len(self.block) + len(self.tail)


def frame_sequence(
    processor: Any, adapter: Any, image_token_id: int, question: str, *, order: str = DEFAULT_PROMPT_ORDER
) -> FrameSequence:
    """The :class:`FrameSequence` of ``question``: read from the chat template's prompts about one, two and three
    frames (their ids and the model's positions), which must be the same head and tail around one, two and three
    equal blocks; the block is cut as close around the frame as that allows."""
    ids, positions = [], []
    for frames in (1, 2, 3):
        inputs = blank_inputs(processor, adapter, question, order, frames)
        ids.append(inputs["input_ids"][0])
        found = adapter.positions(inputs)
        positions.append(torch.arange(ids[-1].shape[0])[None] if found is None else found[:, 0])
    block = ids[1].shape[0] - ids[0].shape[0]
    first = int((ids[0] == image_token_id).nonzero()[0, 0])
    for start in range(first, -1, -1):
        head, unit, tail = ids[0][:start], ids[0][start : start + block], ids[0][start + block :]
        if (unit == image_token_id).sum() != (ids[0] == image_token_id).sum():
            continue  # the block must hold all of the frame's tokens
        if not all(torch.equal(ids[n - 1], torch.cat([head, unit.repeat(n), tail])) for n in (2, 3)):
            continue
        one = positions[0]
        advance = int(positions[1][0, start + block] - one[0, start])
        sequence = FrameSequence(
            head,
            unit,
            tail,
            one[:, :start],
            one[:, start : start + block],
            one[:, start + block :],
            advance,
            multimodal_positions=one.shape[0] == 3,
        )
        if all(torch.equal(sequence.positions(n)[:, 0], positions[n - 1]) for n in (1, 2, 3)):
            return sequence
    raise ValueError(
        "this model's chat template does not lay several frames out as equal blocks between one start and one end, so "
        "an episode's frames cannot be appended one at a time; ask it about windows instead"
    )


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
