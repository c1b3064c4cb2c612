"""The judges that watch the episode, written plainly: a question's scores for a prompt of several frames built
by the model's own processor and chat template (``apply_chat_template(tokenize=True)``, as a transformers user
builds it: each frame an image, or the frames of one video), and a full forward of transformers' own model
without a cache (a model loaded apart, none of the judge's modules in it)."""

from __future__ import annotations

import functools

import numpy as np
import torch

from vlmrm_fast.models.judge.judge_models import load_judge


@functools.cache
def transformers_model(name: str, seed: int = 0):
    """The tiny judge ``name`` as transformers builds it (its own modules), with the weights of seed ``seed``."""
    return load_judge(name, device=torch.device("cpu"), seed=seed)


def turn(question: str, frames, *, video: bool = False, order: str = "image_first") -> list[dict]:
    """One user turn of ``frames`` (uint8 (H, W, 3)) and ``question``, as transformers' chat templates take it."""
    from PIL import Image

    if video:
        pictures = [{"type": "video", "video": [np.ascontiguousarray(f) for f in frames]}]
    else:
        pictures = [{"type": "image", "image": Image.fromarray(np.ascontiguousarray(f))} for f in frames]
    text = [{"type": "text", "text": question}]
    return [{"role": "user", "content": pictures + text if order == "image_first" else text + pictures}]


def answer_logits(name: str, question: str, frames, *, video: bool = False, order: str = "image_first"):
    """The float64 logits (V,) of the answer's first token after the prompt about ``frames``: a full forward of the
    inputs the processor's ``apply_chat_template`` makes (the frames of a video are taken as given, none sampled
    out)."""
    loaded = transformers_model(name)
    inputs = loaded.processor.apply_chat_template(
        turn(question, frames, video=video, order=order),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        processor_kwargs={"do_sample_frames": False} if video else {},
    )
    with torch.no_grad():
        return loaded.model(**inputs).logits[0, -1].double()


def score(name: str, criterion, logits) -> float:
    """``criterion``'s score (the formula written out) from the answer's logits."""
    loaded = transformers_model(name)
    tokenizer, lead = loaded.processor.tokenizer, loaded.family.answer_lead
    yes, no = (
        tokenizer(lead + word, add_special_tokens=False)["input_ids"][0] for word in (criterion.yes, criterion.no)
    )
    log_p = torch.log_softmax(logits, dim=-1)
    formulas = {
        "yes_vs_no": torch.exp(log_p[yes]) / (torch.exp(log_p[yes]) + torch.exp(log_p[no])),
        "log_p_yes": log_p[yes],
        "log_odds": log_p[yes] - log_p[no],
    }
    return float(formulas[criterion.score])


def reference_scores(name: str, criteria, frames, *, video: bool = False, order: str = "image_first") -> np.ndarray:
    """Every criterion's score (criteria,) for one prompt about ``frames``."""
    return np.array(
        [score(name, c, answer_logits(name, c.question, frames, video=video, order=order)) for c in criteria]
    )


def episode_streams(lengths, steps: int, size=(224, 224), seed: int = 0):
    """Frames of envs under auto-reset: env ``e``'s episodes last ``lengths[e]`` steps. Returns the frames of each step
    (steps, envs, H, W, 3), whether each starts an episode (steps, envs), and each step's episode so far per env (a
    list over steps of lists over envs of the episode's frames up to that step)."""
    rng = np.random.default_rng(seed)
    n = len(lengths)
    frames = rng.integers(0, 256, (steps, n, *size, 3), dtype=np.uint8)
    starts = np.array([[t % lengths[e] == 0 for e in range(n)] for t in range(steps)])
    so_far, current = [], [[] for _ in range(n)]
    for t in range(steps):
        for e in range(n):
            if starts[t, e]:
                current[e] = []
            current[e].append(frames[t, e])
        so_far.append([list(c) for c in current])
    return frames, starts, so_far
