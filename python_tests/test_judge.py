"""Generative VLM judges: rewards against a plain, uncached transformers forward of the same model on the
inputs its own chat template and processor make (``apply_chat_template(tokenize=True)``, as a transformers
user builds them), for every family and both prompt orders; the image processor on the device against
the processor; the refusals. The models are the tiny random judges the package builds offline, whose
tokenizers add a start token (BOS) as Llama 3's does."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from tolerances import assert_rewards_close

from vlmrm_fast.checks import FieldError
from vlmrm_fast.frames.views import FrameLayout, FrameView
from vlmrm_fast.models.judge import TINY_JUDGES, families
from vlmrm_fast.models.judge.judge_models import load_judge
from vlmrm_fast.models.judge.prompt import PROMPT_ORDERS
from vlmrm_fast.reward import QuestionCriterion, load_reward_model
from vlmrm_fast.reward.judge import JudgeRewardModel

JUDGES = list(TINY_JUDGES)
QUESTIONS = (
    QuestionCriterion("Is the pole upright?"),
    QuestionCriterion("Is the robot kneeling?", score="log_p_yes"),
    QuestionCriterion(
        "Does this image show a car at the peak of the mountain?", score="log_odds", yes="True", no="False"
    ),
)


@pytest.fixture(autouse=True)
def smolvlm_without_num2words(monkeypatch):
    """SmolVLM's processor imports num2words only to phrase video prompts; where the package is missing
    (it comes with the judge extra), frames need none of it."""
    import importlib.util

    if importlib.util.find_spec("num2words") is None:
        import transformers.models.smolvlm.processing_smolvlm as smolvlm

        monkeypatch.setattr(smolvlm, "num2words", str)
        row = families.JUDGE_FAMILIES["smolvlm"]
        monkeypatch.setitem(families.JUDGE_FAMILIES, "smolvlm", dataclasses.replace(row, packages=()))


def frames_of(n: int, size=(224, 224), seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *size, 3), dtype=np.uint8)


@functools.cache
def judge(name: str, batch_size: int = 4, prompt_order: str = "image_first") -> JudgeRewardModel:
    return load_reward_model(
        name, criteria=list(QUESTIONS), device="cpu", batch_size=batch_size, prompt_order=prompt_order
    )


def reference_inputs(processor, question: str, frame: np.ndarray, order: str = "image_first", **options) -> dict:
    """The model's inputs for ``question`` about one uint8 frame as a transformers user builds them: one user
    turn through the processor's ``apply_chat_template`` with the generation prompt, ``tokenize=True``
    (``options``: the processor's call-time settings, e.g. ``do_image_splitting``)."""
    from PIL import Image

    image = {"type": "image", "image": Image.fromarray(frame)}
    text = {"type": "text", "text": question}
    turn = [{"role": "user", "content": [image, text] if order == "image_first" else [text, image]}]
    return dict(
        processor.apply_chat_template(
            turn,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
            processor_kwargs=options,
        )
    )


@functools.cache
def transformers_model(name: str):
    """The judge's model as transformers builds it, none of the judge's modules in it, with the same weights."""
    model = load_judge(name, device=torch.device("cpu")).model
    ours = judge(name).judge.model.state_dict()
    assert all(torch.equal(value, ours[key]) for key, value in model.state_dict().items())
    return model


def reference_rewards(model: JudgeRewardModel, frames: np.ndarray, processor=None, **options) -> np.ndarray:
    """Each question's reward written plainly: the inputs a transformers user makes for the whole prompt and one
    frame (``processor``, default the judge's, with call-time ``options``), a full forward of transformers' own
    model without a cache, a log-softmax of the last position's logits, the task's formula."""
    hf, processor = transformers_model(model.judge.model_id), processor or model.judge.processor
    tokenizer = processor.tokenizer
    lead = model.judge.family.answer_lead
    columns = []
    for task in QUESTIONS:
        yes, no = (tokenizer(lead + word, add_special_tokens=False)["input_ids"][0] for word in (task.yes, task.no))
        column = []
        for frame in frames:
            with torch.no_grad():
                inputs = reference_inputs(processor, task.question, frame, model.prompt_order, **options)
                logits = hf(**inputs).logits[0, -1].double()
            log_p = torch.log_softmax(logits, dim=-1)
            formulas = {
                "yes_vs_no": torch.exp(log_p[yes]) / (torch.exp(log_p[yes]) + torch.exp(log_p[no])),
                "log_p_yes": log_p[yes],
                "log_odds": log_p[yes] - log_p[no],
            }
            column.append(float(formulas[task.score]))
        columns.append(column)
    return np.array(columns).T


@pytest.mark.parametrize("order", PROMPT_ORDERS)
@pytest.mark.parametrize("name", JUDGES)
def test_rewards_equal_a_full_uncached_forward(name, order):
    """Both prompt orders, every family, three questions (image first: one pass over the frame's tokens shared
    by the three, each question's tokens after it)."""
    model = judge(name, prompt_order=order)
    frames = frames_of(5)
    rewards = model(frames).numpy()
    expected = reference_rewards(model, frames)
    np.testing.assert_allclose(rewards, expected, atol=1e-4, rtol=0)
    assert rewards.shape == (5, len(QUESTIONS))
    assert np.ptp(rewards, axis=0).max() > 1e-6, "the frames must move the rewards (the image reaches the model)"


@pytest.mark.parametrize("order", PROMPT_ORDERS)
@pytest.mark.parametrize("name", JUDGES)
def test_the_prompt_is_the_chat_templates_with_one_start_token(name, order):
    """The prompt's ids are those apply_chat_template(tokenize=True) makes: a tokenizer that adds a BOS (as Llama 3's
    does for Idefics3) puts it once, also where the template writes it (Idefics3's <|begin_of_text|>, SmolVLM's
    <|im_start|>), and the frame stands where the order puts it."""
    model = judge(name, prompt_order=order)
    tokenizer = model.judge.processor.tokenizer
    assert tokenizer("yes")["input_ids"][0] == tokenizer.bos_token_id, "the tiny tokenizers add a BOS"
    for column, task in enumerate(QUESTIONS):
        expected = reference_inputs(model.judge.processor, task.question, frames_of(1)[0], order)["input_ids"][0]
        ours = model.prompt(column)
        assert torch.equal(ours, expected), tokenizer.decode(ours[:8])
        assert int((ours == tokenizer.bos_token_id).sum()) == 1
        text = tokenizer.decode(ours)
        image = tokenizer.convert_ids_to_tokens(model.model.config.image_token_id)
        assert (text.index(task.question) > text.rindex(image)) == (order == "image_first")


@pytest.mark.parametrize("order", PROMPT_ORDERS)
@pytest.mark.parametrize("name", ["vlmrm-tiny-qwen2.5-vl", "vlmrm-tiny-idefics3"])
def test_a_prompt_of_several_frames_is_the_templates(name, order):
    """The one prompt builder lays out any number of frames (a window's): two frames' prompt is the chat template's
    with two images, the frames' tokens spanning both."""
    from PIL import Image

    from vlmrm_fast.models.judge.prompt import layout_prompt

    model = judge(name)
    processor = model.judge.processor
    layout = layout_prompt(
        processor,
        model.adapter,
        model.model.config.image_token_id,
        "Up?",
        order=order,
        frames=2,
        context=None,
        field="q",
    )
    blank = {"type": "image", "image": Image.fromarray(np.zeros((*model.image_size, 3), np.uint8))}
    text = {"type": "text", "text": "Up?"}
    turn = [{"role": "user", "content": [blank, blank, text] if order == "image_first" else [text, blank, blank]}]
    expected = processor.apply_chat_template(
        turn, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )["input_ids"]
    assert torch.equal(layout.ids, expected)
    image = model.model.config.image_token_id
    one = int((model.prompt() == image).sum())
    assert int((layout.ids[0, layout.frames_start : layout.frames_end] == image).sum()) == 2 * one
    assert (
        not (layout.ids[0, : layout.frames_start] == image).any()
        and not (layout.ids[0, layout.frames_end :] == image).any()
    )


def test_image_first_is_the_default_and_its_questions_share_one_pass_over_the_frame():
    """The models' own order by default; image first, the questions' prompts agree up to the frame's end, so one
    pass over the frame's tokens serves all three (question first: one per question)."""
    model = load_reward_model("vlmrm-tiny-qwen2-vl", criteria=list(QUESTIONS), device="cpu")
    assert model.prompt_order == "image_first"
    assert [len(group.answers) for group in model._groups] == [3]
    assert [len(group.answers) for group in judge("vlmrm-tiny-qwen2-vl", prompt_order="question_first")._groups] == [
        1,
        1,
        1,
    ]


def test_a_thinking_models_answer_position_is_refused():
    """A Qwen3-VL "Thinking" model's generation prompt opens a thinking block: the next token is no answer."""
    loaded = load_judge("vlmrm-tiny-qwen3-vl", device=torch.device("cpu"))
    processor = loaded.processor
    processor.chat_template = processor.chat_template.replace(
        "<|im_start|>assistant\n{% endif %}", "<|im_start|>assistant\n<think>\n{% endif %}"
    )
    loaded = dataclasses.replace(loaded, model_id="Qwen/Qwen3-VL-2B-Thinking")
    with pytest.raises(FieldError) as info:
        JudgeRewardModel(loaded, list(QUESTIONS), device=torch.device("cpu"))
    message = str(info.value)
    assert message.startswith("model: Qwen/Qwen3-VL-2B-Thinking's chat template opens a thinking block")
    assert "use its Instruct version ('Qwen/Qwen3-VL-2B-Instruct')" in message


@pytest.mark.parametrize("name", JUDGES)
def test_pixels_equal_the_processor(name):
    """The image processor's steps on the device equal the processor's pixel values (fp32, 1e-5), for
    frames of the judge's input size and, resized first, for frames of another size."""
    model = judge(name)
    processor = model.judge.processor
    for size in ((224, 224), (120, 160)):
        frames = frames_of(2, size, seed=1)
        pixels = model.preprocess(FrameView.of(torch.from_numpy(frames)))
        if size != model.image_size:
            from torchvision.transforms.v2 import functional as tvF

            resized = tvF.resize(
                torch.from_numpy(frames).permute(0, 3, 1, 2),
                list(model.image_size),
                antialias=True,
                interpolation=tvF.InterpolationMode.BICUBIC,
            )
            frames = resized.permute(0, 2, 3, 1).numpy()
        for i, frame in enumerate(frames):
            expected = reference_inputs(processor, "Is the pole upright?", frame)["pixel_values"]
            ours = model.adapter.as_processor_pixels(pixels[i : i + 1])
            np.testing.assert_allclose(ours.numpy(), expected.reshape(ours.shape).numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["vlmrm-tiny-smolvlm", "vlmrm-tiny-idefics3"])
def test_image_splitting_and_longest_edge_set_the_tiling_processors(name):
    """do_image_splitting and longest_edge: fewer tiles and image tokens per frame, and the rewards of a
    transformers user passing the same settings to the processor. The tiny processor cuts a 64 px edge into
    2 x 2 tiles of 32 px and a global image (5 tiles, 4 tokens each)."""
    fresh = load_judge(name, device=torch.device("cpu")).processor
    frames = frames_of(2)
    image_token = None
    for options, tiles in (({}, 5), ({"do_image_splitting": False}, 1), ({"longest_edge": 32}, 1)):
        model = load_reward_model(name, criteria=list(QUESTIONS), device="cpu", **options)
        image_token = model.model.config.image_token_id
        assert model.adapter.pixel_shape[0] == tiles
        assert int((model.prompt() == image_token).sum()) == 4 * tiles
        call = {"size": {"longest_edge": options["longest_edge"]}} if "longest_edge" in options else options
        np.testing.assert_allclose(
            model(frames).numpy(), reference_rewards(model, frames, fresh, **call), atol=1e-4, rtol=0
        )


def test_tiling_settings_are_refused_where_there_are_no_tiles():
    with pytest.raises(FieldError, match=r"^do_image_splitting: sets how SmolVLM and Idefics3 cut a frame into tiles"):
        load_reward_model("vlmrm-tiny-qwen2-vl", target_prompts="up", device="cpu", do_image_splitting=False)
    with pytest.raises(FieldError, match=r"^longest_edge: sets the edge a SmolVLM or Idefics3 judge resizes a frame"):
        load_reward_model("vlmrm-tiny", target_prompts="up", device="cpu", longest_edge=512)
    with pytest.raises(FieldError, match=r"^prompt_order: 'image_last' is not one of image_first, question_first"):
        load_reward_model("vlmrm-tiny-qwen2-vl", target_prompts="up", device="cpu", prompt_order="image_last")


#: Each family's image tokens for a 224 x 224 frame at its released models' processor settings
#: (preprocessor_config.json, processor_config.json's image_seq_len), as docs/judge.md states them.
REAL_TOKENS_PER_FRAME = {
    "Qwen/Qwen2-VL-2B-Instruct": (dict(min_pixels=3136, max_pixels=12845056), 64),
    "Qwen/Qwen3-VL-2B-Instruct": (
        dict(
            patch_size=16,
            image_mean=[0.5] * 3,
            image_std=[0.5] * 3,
            size={"shortest_edge": 65536, "longest_edge": 2**24},
        ),
        64,
    ),
    "HuggingFaceTB/SmolVLM-256M-Instruct": (dict(size=2048, tile=512, image_seq_len=64, smolvlm2=False), 1088),
    "HuggingFaceTB/SmolVLM2-2.2B-Instruct": (dict(size=1536, tile=384, image_seq_len=81, smolvlm2=True), 1377),
    "HuggingFaceM4/Idefics3-8B-Llama3": (dict(size=1456, tile=364, image_seq_len=169, smolvlm2=False), 2873),
}


@pytest.mark.parametrize(
    ("model_id", "split"),
    [(model_id, True) for model_id in REAL_TOKENS_PER_FRAME]
    + [(model_id, False) for model_id, (settings, _) in REAL_TOKENS_PER_FRAME.items() if "tile" in settings],
)
def test_the_docs_tokens_per_frame_are_the_released_processors(model_id, split):
    """The released processors' settings, through transformers' processor classes: the image tokens of one 224 px
    frame, with image splitting (the default) and without (one tile: image_seq_len tokens), as docs/judge.md's
    table gives them."""
    import pathlib

    import transformers as tf

    settings, tokens = REAL_TOKENS_PER_FRAME[model_id]
    settings = dict(settings)
    if "tile" in settings:
        smolvlm2 = settings.pop("smolvlm2")
        tile, seq = settings.pop("tile"), settings.pop("image_seq_len")
        image_processor = (tf.SmolVLMImageProcessor if smolvlm2 else tf.Idefics3ImageProcessor)(
            size={"longest_edge": settings.pop("size")}, max_image_size={"longest_edge": tile}, do_image_splitting=split
        )
        tiny = load_judge("vlmrm-tiny-smolvlm", device=torch.device("cpu")).processor
        parts = (
            (image_processor, tiny.tokenizer, tf.SmolVLMVideoProcessor())
            if smolvlm2
            else (image_processor, tiny.tokenizer)
        )
        processor = (tf.SmolVLMProcessor if smolvlm2 else tf.Idefics3Processor)(
            *parts, image_seq_len=seq, chat_template=tiny.chat_template
        )
        tokens = tokens if split else seq
        image = "<image>"
    else:
        tiny = load_judge("vlmrm-tiny-qwen2-vl", device=torch.device("cpu")).processor
        processor = tf.Qwen2VLProcessor(
            tf.Qwen2VLImageProcessor(**settings),
            tiny.tokenizer,
            tf.Qwen2VLVideoProcessor(),
            chat_template=tiny.chat_template,
        )
        image = "<|image_pad|>"
    ids = reference_inputs(processor, "Up?", frames_of(1)[0])["input_ids"][0]
    assert int((ids == processor.tokenizer.convert_tokens_to_ids(image)).sum()) == tokens
    docs = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "judge.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith(f"| `{model_id}`"))
    assert f"{tokens:,}" in row.split("|")[3 if split else 4], row


def test_a_renderers_view_is_read_where_it_lies():
    """The EGL renderer lends RGBA rows bottom-up: the judge reads them as the upright RGB frames."""
    model = judge("vlmrm-tiny-qwen2-vl")
    frames = frames_of(3)
    rgba = np.concatenate([frames[:, ::-1], np.full((3, 224, 224, 1), 7, np.uint8)], axis=-1).copy()
    buffer = torch.from_numpy(rgba)
    layout = FrameLayout(
        3, 224, 224, pixel_stride=4, row_stride=-224 * 4, frame_row_stride=224 * 224 * 4, offset=223 * 224 * 4
    )
    pixels = model.preprocess(FrameView(buffer.data_ptr(), layout, buffer.device, owner=buffer))
    assert torch.equal(pixels, model.preprocess(FrameView.of(torch.from_numpy(frames))))


def sharpen_attention(tower) -> None:
    """Queries and keys of a random tiny tower with weights 25x larger (the same in every tower it is given):
    its attention is then far from uniform, so a wrong rotation or a frame attending outside itself shows."""
    with torch.no_grad():
        for block in tower.blocks:
            block.attn.qkv.weight.mul_(25.0)


@pytest.mark.parametrize(
    ("name", "interleaved"),
    [
        ("vlmrm-tiny-qwen2-vl", True),
        ("vlmrm-tiny-qwen2.5-vl", True),
        ("vlmrm-tiny-qwen3-vl", True),
        ("vlmrm-tiny-qwen2-vl", False),  # the path of a quantized projection (FP8), its halves turned in place
    ],
)
def test_the_vision_tower_equals_transformers_own(name, interleaved, monkeypatch):
    """The judge's vision tower (frames embedded by a 2D convolution, the grid's inputs computed once, all
    frames in one attention call per block, queries and keys turned together; Qwen2.5-VL's windows too)
    against transformers' own tower on the processor's pixel values, frame by frame."""
    ours, theirs = (load_judge(name, device=torch.device("cpu")) for _ in range(2))
    for judged in (ours, theirs):
        sharpen_attention(judged.model.model.visual)  # before the judge is built: it keeps copies of some weights
    model = JudgeRewardModel(ours, list(QUESTIONS), device=torch.device("cpu"), batch_size=4)
    hf, processor = theirs.model, model.judge.processor
    for block in model.judge.model.model.visual.blocks:
        assert block.attn.interleaved
        block.attn.interleaved = interleaved
    frames = frames_of(4)
    pixels = model.preprocess(FrameView.of(torch.from_numpy(frames)))
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(
        torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or sdpa(*a, **k)
    )
    with torch.inference_mode():
        ours = model.adapter.encode(pixels)
        ours = model.adapter.encode(pixels)  # the grid's inputs made once are reused
    assert len(calls) == 2 * len(model.judge.model.model.visual.blocks), "one call per block for all four frames"
    for i, frame in enumerate(frames):
        inputs = reference_inputs(processor, "Is the pole upright?", frame)
        with torch.no_grad():
            expected = hf.model.get_image_features(
                pixel_values=inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"], return_dict=True
            )
        np.testing.assert_allclose(ours.pooler_output[i].numpy(), expected.pooler_output[0].numpy(), atol=1e-5, rtol=0)
        for deep, deep_expected in zip(
            getattr(ours, "deepstack_features", None) or [], getattr(expected, "deepstack_features", None) or []
        ):
            np.testing.assert_allclose(deep[i].numpy(), deep_expected[0].numpy(), atol=1e-5, rtol=0)


def rms(x: torch.Tensor) -> float:
    return float(x.double().pow(2).mean().sqrt())


@pytest.mark.parametrize("name", ["vlmrm-tiny-qwen2-vl", "vlmrm-tiny-qwen2.5-vl", "vlmrm-tiny-qwen3-vl"])
def test_a_bf16_judge_is_as_accurate_as_transformers_bf16(name):
    """bf16 weights, the same frames (random, and near-grey ones, where folding the normalization's shift into a
    bf16 bias lost most): the judge's patch embedding and vision tower against a float64 forward of the same
    weights, their error against transformers' own bf16 path's error. The patch embedding rounds once (its
    output to bf16) where transformers' rounds the normalized frame too: no larger. The blocks after it are
    transformers' own, run in another order: the same error give or take a few percent."""
    ours_judge, theirs, exact = (load_judge(name, device=torch.device("cpu"), dtype=torch.bfloat16) for _ in range(3))
    model = JudgeRewardModel(ours_judge, list(QUESTIONS[:1]), device=torch.device("cpu"), precision="bf16")
    hf, reference = theirs.model.model, exact.model.double().model
    rng = np.random.default_rng(3)
    grey = np.clip(np.round(122.8 + rng.normal(0, 1.5, (3, 224, 224, 3))), 0, 255).astype(np.uint8)
    for frames in (frames_of(3), grey):
        pixels = model.preprocess(FrameView.of(torch.from_numpy(frames)))
        with torch.inference_mode():
            embedded = model.judge.model.model.visual.patch_embed(pixels).double().chunk(3)
            pooled = model.adapter.encode(pixels).pooler_output  # one tensor per frame
        errors = {"ours": ([], []), "transformers": ([], [])}
        for i, frame in enumerate(frames):
            inputs = reference_inputs(model.judge.processor, "Up?", frame)
            values, grid = inputs["pixel_values"], inputs["image_grid_thw"]
            with torch.inference_mode():
                exact_embedded = reference.visual.patch_embed(values.double())
                exact_pooled = reference.get_image_features(
                    pixel_values=values.double(), image_grid_thw=grid, return_dict=True
                ).pooler_output[0]
                theirs_embedded = hf.visual.patch_embed(values)
                theirs_pooled = hf.get_image_features(
                    pixel_values=values, image_grid_thw=grid, return_dict=True
                ).pooler_output[0]
            for key, (embed, pool) in (
                ("ours", (embedded[i], pooled[i])),
                ("transformers", (theirs_embedded, theirs_pooled)),
            ):
                errors[key][0].append(embed.double() - exact_embedded)
                errors[key][1].append(pool.double() - exact_pooled)
        ours_embed, ours_pool = (rms(torch.cat(e)) for e in errors["ours"])
        theirs_embed, theirs_pool = (rms(torch.cat(e)) for e in errors["transformers"])
        assert ours_embed <= theirs_embed, (ours_embed, theirs_embed)
        assert ours_pool <= 1.1 * theirs_pool, (ours_pool, theirs_pool)


def test_batch_size_does_not_change_rewards():
    frames = frames_of(5)
    one = judge("vlmrm-tiny-qwen2-vl", batch_size=1)(frames)
    three = judge("vlmrm-tiny-qwen2-vl", batch_size=3)(frames)
    assert_rewards_close(three.numpy(), one.numpy())


@pytest.mark.parametrize("order", PROMPT_ORDERS)
@pytest.mark.parametrize("name", ["vlmrm-tiny-qwen3-vl", "vlmrm-tiny-smolvlm"])
def test_the_prefix_cache_does_not_change_rewards(name, order):
    """The prompt's frame-independent start run once into a KV cache against every frame running its whole prompt."""
    model = judge(name, prompt_order=order)
    frames = frames_of(3)
    cached = model(frames).numpy()
    assert all(group.head_kv for group in model._groups)
    model.cache_prefix = False
    try:
        model.set_criteria(list(QUESTIONS))
        assert all(not group.head_kv for group in model._groups)
        assert_rewards_close(model(frames).numpy(), cached)
    finally:
        model.cache_prefix = True
        model.set_criteria(list(QUESTIONS))


def test_questions_share_one_vision_pass(monkeypatch):
    model = judge("vlmrm-tiny-idefics3", batch_size=4)
    calls = []
    encode = model.adapter.encode
    monkeypatch.setattr(model.adapter, "encode", lambda pixels: calls.append(len(pixels)) or encode(pixels))
    model(frames_of(6))
    assert calls == [4, 2]


def test_one_target_prompt_asks_a_question_about_it():
    model = load_reward_model("vlmrm-tiny-qwen2-vl", target_prompts="a humanoid robot kneeling", device="cpu")
    (task,) = model.criteria
    assert task.question == "Does this image show a humanoid robot kneeling? Answer yes or no."
    assert model(frames_of(2)).shape == (2,) and not model.multi_criteria


def test_answer_words_of_several_tokens_are_refused_naming_the_split():
    with pytest.raises(FieldError) as info:
        load_reward_model("vlmrm-tiny-qwen2-vl", criteria=[QuestionCriterion("Is it up?", yes="Yep")], device="cpu")
    message = str(info.value)
    assert message.startswith("criteria[0].yes: 'Yep' is 3 tokens") and "'Y' + 'e' + 'p'" in message
    assert "choose another word" in message


@pytest.mark.parametrize(
    ("task", "fragment"),
    [
        (dict(question="  "), "question: is empty; ask about the frame"),
        (dict(question="Up?", score="p"), "score: 'p' is unknown; use one of 'yes_vs_no', 'log_p_yes', 'log_odds'"),
        (dict(question="Up?", yes="Yes", no="Yes"), "no: equals yes ('Yes'): the two answers must differ"),
    ],
)
def test_bad_questions_are_refused(task, fragment):
    with pytest.raises(FieldError, match=fragment.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        QuestionCriterion(**task)


def test_a_prompt_too_long_for_the_context_is_refused():
    long = "Is " + "the pole upright and " * 9000 + "the cart still?"
    with pytest.raises(FieldError) as info:
        load_reward_model("vlmrm-tiny-qwen2-vl", criteria=[QuestionCriterion(long)], device="cpu")
    message = str(info.value)
    assert message.startswith("criteria[0].question: the prompt with the image is ")
    assert "of them the image's at 224x224), over the model's context of 32768: shorten the question" in message


def test_models_that_are_no_judge_are_refused(tmp_path):
    with pytest.raises(FieldError, match=r"^model: 'vlmrm-tiny' is a CLIP model; question criteria need a generative"):
        load_reward_model("vlmrm-tiny", criteria=[QuestionCriterion("Up?")], device="cpu")
    with pytest.raises(FieldError, match=r"^criteria\[0\]: 'question: Up\?' is a question criterion: a CLIP model"):
        load_reward_model(
            "vlmrm-tiny", criteria=[{"kind": "goal_baseline", "target_prompts": "up"}], device="cpu"
        ).set_criteria([QuestionCriterion("Up?")])
    import json

    for model_type, words in (
        ("qwen2", "is a text-only language model (model_type 'qwen2'): a judge looks at frames; use one of Qwen2-VL"),
        ("clip", "is a contrastive image-text model (model_type 'clip'), not a generative VLM"),
        ("llava", "is a vision-language model of type 'llava', which has no judge adapter here"),
    ):
        folder = tmp_path / model_type
        folder.mkdir()
        config = {"model_type": model_type, **({"vision_config": {}} if model_type != "qwen2" else {})}
        (folder / "config.json").write_text(json.dumps(config))
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            load_reward_model(f"local-dir:{folder}", criteria=[QuestionCriterion("Up?")], device="cpu")


def test_clip_criteria_and_fields_are_refused_for_a_judge():
    with pytest.raises(FieldError, match=r"^criteria\[0\]: a generative VLM judge answers questions; BinaryCriterion"):
        load_reward_model(
            "vlmrm-tiny-qwen2-vl", criteria=[{"goal_prompt": "up", "negative_prompts": "down"}], device="cpu"
        )
    with pytest.raises(FieldError, match=r"^target_prompts: a judge asks one question about one target prompt, got 2"):
        load_reward_model("vlmrm-tiny-qwen2-vl", target_prompts=["up", "upright"], device="cpu")
    with pytest.raises(FieldError, match=r"^alpha: is CLIP's goal-baseline projection"):
        load_reward_model("vlmrm-tiny-qwen2-vl", target_prompts="up", baseline_prompts="down", alpha=0.5, device="cpu")
    with pytest.raises(
        FieldError,
        match=r"^checkpoint: sets a local weights file, a field of the video, mean_of_frames and clip families; "
        r"'vlmrm-tiny-qwen2-vl' is a generative VLM judge \(the judge family\), which does not take it: leave it out$",
    ):
        load_reward_model("vlmrm-tiny-qwen2-vl", target_prompts="up", checkpoint="w.pt", device="cpu")
    with pytest.raises(
        FieldError,
        match=r"^image_size: sets a generative VLM judge's input size, a field of the preference, window_judge, "
        r"prefix_judge and judge families; 'vlmrm-tiny' is a CLIP frame model \(the clip family\), which does not "
        r"take it: leave it out$",
    ):
        load_reward_model("vlmrm-tiny", target_prompts="up", image_size=112, device="cpu")


def test_an_fp8_judge_scores_as_its_bf16_self():
    """FP8 linear layers (torchao, emulated on the CPU) in a judge built after the conversion: the quantized
    projections run as they are, and the rewards stay near the bf16 judge's."""
    from vlmrm_fast.models.judge.fp8 import convert_judge_to_fp8

    judges = [load_judge("vlmrm-tiny-qwen2-vl", device=torch.device("cpu"), dtype=torch.bfloat16) for _ in range(2)]
    assert convert_judge_to_fp8(judges[1].model, emulate=True) > 0
    bf16, fp8 = (JudgeRewardModel(j, list(QUESTIONS[:1]), device=torch.device("cpu"), precision="bf16") for j in judges)
    assert not any(block.attn.interleaved for block in fp8.judge.model.model.visual.blocks)
    frames = frames_of(3)
    np.testing.assert_allclose(fp8(frames).float().numpy(), bf16(frames).float().numpy(), atol=0.02, rtol=0)


def test_fp8_where_it_cannot_run_is_refused():
    with pytest.raises(Exception, match=r"^precision='fp8': FP8 needs an NVIDIA GPU .*Use precision='bf16'"):
        load_reward_model("vlmrm-tiny-qwen2-vl", target_prompts="up", device="cpu", precision="fp8")


def test_a_missing_transformers_extra_names_the_install(monkeypatch):
    import importlib.metadata

    from vlmrm_fast.models.errors import MissingDependencyError

    monkeypatch.setattr(importlib.metadata, "version", lambda package: "4.46.0")
    with pytest.raises(MissingDependencyError) as info:
        load_reward_model("vlmrm-tiny-qwen2-vl", target_prompts="up", device="cpu")
    assert str(info.value) == (
        "vlmrm-tiny-qwen2-vl is a generative VLM judge, which runs through transformers >= 5.24; transformers "
        "4.46.0 is installed, older than 5.24: pip install 'vlmrm-fast[judge]' (from a checkout: pip install '.[judge]')"
    )
    monkeypatch.undo()
    monkeypatch.setitem(
        families.JUDGE_FAMILIES,
        "smolvlm",
        dataclasses.replace(families.JUDGE_FAMILIES["smolvlm"], packages=("no_such_pkg",)),
    )
    with pytest.raises(
        MissingDependencyError, match=r"SmolVLM's processor needs no_such_pkg, which is not installed: pip"
    ):
        load_reward_model("vlmrm-tiny-smolvlm", target_prompts="up", device="cpu")


def test_offline_a_missing_hub_judge_fails_fast_with_the_download_line(monkeypatch, tmp_path):
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(Exception) as info:
        load_reward_model("Qwen/Qwen2-VL-2B-Instruct", target_prompts="up", device="cpu", cache_dir=str(tmp_path))
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert message.startswith(
        f"the judge Qwen/Qwen2-VL-2B-Instruct: not in the local cache ({tmp_path}) and HF_HUB_OFFLINE"
    )
    assert f"`vlmrm-fast download Qwen/Qwen2-VL-2B-Instruct --cache-dir {tmp_path}`" in message


@pytest.mark.parametrize("target", [True, False], ids=["target_prompts", "question"])
def test_a_model_name_is_judged_by_what_it_is(tmp_path, target):
    """Folders, tiny names and hub names, each named as what it is with what is missing, whether the reward asks
    for a CLIP (target prompts) or a judge (question criteria); no network is asked."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "weights.pt").write_bytes(b"0")
    cases = {
        str(tmp_path / "missing"): f"model: the folder '{tmp_path / 'missing'}' does not exist; give a judge's",
        f"local-dir:{tmp_path / 'missing'}": f"model: the folder '{tmp_path / 'missing'}' does not exist",
        str(tmp_path / "empty"): f"model: the folder '{tmp_path / 'empty'}' holds no model: neither a transformers "
        "config.json (a judge) nor an open_clip_config.json (a CLIP)",
        str(tmp_path / "weights.pt"): f"model: '{tmp_path / 'weights.pt'}' is a file, not a model's folder",
        "vlmrm-tiny-qwen2vl": "model: 'vlmrm-tiny-qwen2vl' is no tiny model; did you mean 'vlmrm-tiny-qwen2-vl'?",
        "vlmrm-tiny-smolvml": "model: 'vlmrm-tiny-smolvml' is no tiny model; did you mean 'vlmrm-tiny-smolvlm'?",
        "laion/CLIP-ViT-B-32-laion2B-s34B-b79K": "model: 'laion/CLIP-ViT-B-32-laion2B-s34B-b79K' is an open_clip model "
        "on the Hugging Face hub (a CLIP): name it 'hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K' or "
        "'ViT-B-32/laion2b_s34b_b79k'",
    }
    task = dict(target_prompts="up") if target else dict(criteria=[QuestionCriterion("Up?")])
    for name, start in cases.items():
        with pytest.raises(FieldError) as info:
            load_reward_model(name, device="cpu", **task)
        assert str(info.value).startswith(start), str(info.value)
    with pytest.raises(ValueError, match=r"unknown CLIP model 'ViT-L-41'\. Did you mean .*ViT-L-14"):
        load_reward_model("ViT-L-41/laion2b_s32b_b82k", device="cpu", **task)


def test_a_hub_judge_is_checked_by_its_config_before_its_weights_download(tmp_path, monkeypatch):
    """With network, a hub repository's config.json comes first: a text-only model, a CLIP, a repository holding no
    transformers model and an open_clip one are refused before any weights are downloaded."""
    import json

    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    from vlmrm_fast.models.judge import judge_models as judge_load

    files = {
        ("org/text-model", "config.json"): {"model_type": "qwen2"},
        ("org/clip-model", "config.json"): {"model_type": "clip", "vision_config": {}},
        ("org/open-clip", "open_clip_config.json"): {"model_cfg": {}},
    }
    calls = []

    def hf_hub_download(repo_id, filename, cache_dir=None, **kwargs):
        calls.append(filename)
        if (repo_id, filename) not in files:
            raise EntryNotFoundError(f"{filename} not in {repo_id}")
        path = tmp_path / repo_id.replace("/", "--") / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(files[repo_id, filename]))
        return str(path)

    def snapshot_download(repo_id, local_files_only=False, **kwargs):
        if local_files_only:
            raise LocalEntryNotFoundError(f"{repo_id} is not cached")
        calls.append(f"the whole of {repo_id}")
        raise AssertionError(f"{repo_id} downloaded in full")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(judge_load, "check_judge_reachable", lambda repo_id, cache_dir=None: None)  # the hub answers
    for repo, words in (
        ("org/text-model", "is a text-only language model (model_type 'qwen2')"),
        ("org/clip-model", "is a contrastive image-text model (model_type 'clip')"),
        ("org/no-model", "the hub repository 'org/no-model' holds no config.json: it is no transformers model"),
        ("org/open-clip", "'org/open-clip' is an open_clip model on the Hugging Face hub (a CLIP): name it "),
    ):
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            load_reward_model(repo, criteria=[QuestionCriterion("Up?")], device="cpu", cache_dir=str(tmp_path))
    assert calls and all(call.endswith(".json") for call in calls), calls


@pytest.mark.parametrize("name", ["vlmrm-tiny-qwen2-vl", "vlmrm-tiny-smolvlm"])
def test_a_frame_size_beyond_the_memory_is_refused_before_allocating(name):
    """image_size 1,000,000 (a frame of 3 TB): one line naming the field, before the prompt's blank frame or the
    family's pixel shape is made."""
    from vlmrm_fast.runtime.memory import JudgeFramesDoNotFitError

    with pytest.raises(JudgeFramesDoNotFitError) as info:
        load_reward_model(name, target_prompts="up", device="cpu", image_size=1_000_000)
    message = str(info.value)
    assert message.startswith("image_size: a 1000000 x 1000000 frame and the image processor's float32 copy of it ")
    assert message.endswith("score smaller frames (image_size: 224 gives Qwen2-VL 64 image tokens)")


def test_a_large_batch_size_allocates_for_the_frames_scored():
    """batch_size 100,000 through the API: scoring 4 frames holds a pixel buffer of 4, and a batch too large for
    the memory is refused in one line before it is allocated."""
    from vlmrm_fast.runtime.memory import JudgeFramesDoNotFitError

    model = load_reward_model("vlmrm-tiny-qwen2-vl", target_prompts="up", device="cpu", batch_size=100_000)
    frames = frames_of(4)
    rewards = model(frames)
    assert model._buffer is not None and model._buffer.shape[0] == 4
    small = load_reward_model("vlmrm-tiny-qwen2-vl", target_prompts="up", device="cpu", batch_size=4)
    assert_rewards_close(rewards.numpy(), small(frames).numpy())
    with pytest.raises(JudgeFramesDoNotFitError, match=r"^batch_size: the pixel input of 10,000,000,000 frames"):
        model.pixel_buffer(10**10)


def test_a_judge_folder_loads_as_the_hub_would(tmp_path):
    """A judge saved with save_pretrained loads from its folder (the form of a hub snapshot) and scores as it did."""
    model = judge("vlmrm-tiny-idefics3")
    model.judge.model.save_pretrained(tmp_path)
    model.judge.processor.save_pretrained(tmp_path)
    again = load_reward_model(str(tmp_path), criteria=list(QUESTIONS), device="cpu", batch_size=4)
    frames = frames_of(2)
    assert_rewards_close(again(frames).numpy(), model(frames).numpy())


def test_the_installed_transformers_keeps_what_the_judges_rely_on():
    """Every transformers internal the judges' fast paths reach (models/judge/contract.py: the precomputed vision
    inputs under the names transformers pops them by, the forward's cache and vision arguments, DynamicCache's
    layers), checked for every family: a release that renames or drops one fails here, naming it."""
    from vlmrm_fast.models.judge.contract import contract_problems

    assert contract_problems() == ()
    for name in TINY_JUDGES:  # and what PackedVisionAttention takes over, on loaded Qwen towers
        model = load_reward_model(name, target_prompts="up", device="cpu")
        assert model.name == name
        model.close()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("drop", "transformers.vision_utils lacks get_vision_position_ids"),
        ("ignore", "get_vision_position_ids ignores a precomputed 'position_ids'"),
    ],
)
def test_a_transformers_that_breaks_the_judges_contract_is_refused_at_load(monkeypatch, change, named):
    """A transformers whose helper is gone, or no longer takes the value precomputed under its name (the tower
    would silently compute it again in every pass), is refused when the judge loads, in one line naming it."""
    import transformers
    from transformers import vision_utils

    from vlmrm_fast.models.errors import MissingDependencyError
    from vlmrm_fast.models.judge.contract import TESTED_TRANSFORMERS, contract_problems

    if change == "drop":
        monkeypatch.delattr(vision_utils, "get_vision_position_ids")
    else:
        original = vision_utils.get_vision_position_ids
        monkeypatch.setattr(
            vision_utils,
            "get_vision_position_ids",
            lambda grid, merge, include_temporal=False, kwargs=None: original(grid, merge),
        )
    contract_problems.cache_clear()
    try:
        with pytest.raises(MissingDependencyError) as info:
            load_reward_model("vlmrm-tiny-qwen2-vl", target_prompts="up", device="cpu")
    finally:
        contract_problems.cache_clear()
    assert str(info.value) == (
        f"vlmrm-tiny-qwen2-vl: transformers {transformers.__version__} changed what the judge's fast paths rely on "
        f"({named}); they are tested with transformers {TESTED_TRANSFORMERS}: "
        f"pip install 'transformers=={TESTED_TRANSFORMERS}.*'"
    )
