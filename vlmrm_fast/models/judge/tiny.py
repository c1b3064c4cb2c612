"""Tiny randomly initialized judges, built offline: a model of each family from a small config, its
tokenizer made in memory with ``tokenizers``, the family's real image processor and a chat template
that lays the prompt out as the family's released template does.

They score frames with meaningless rewards; they exist so that tests and CPU smoke runs exercise the
real code of each family (the same transformers classes, processors and prompt layout) without a
download. ``vlmrm-tiny-qwen2-vl`` is to a judge what ``vlmrm-tiny`` is to CLIP.

Every tiny tokenizer adds a start token (BOS) when it tokenizes text, as Llama 3's does for Idefics3
(Qwen's real tokenizers add none): where a template writes that token itself (Idefics3's
``<|begin_of_text|>``, SmolVLM's ``<|im_start|>``), a prompt rendered to text and tokenized again would
hold it twice, and the tests would see it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

#: Words that are one token each (with and without a leading space, lower and capitalized), so that
#: questions read as short token sequences; any other text falls back to byte-level characters.
_WORDS = (
    "yes no true false is are does do the a an of on in at to and or with this that it image picture frame "
    "show shows robot humanoid pole cart car mountain flag peak upright vertically top kneeling standing "
    "sitting lying arms raised splits lotus position legs done task completed answer question you helpful "
    "assistant user system statement decide whether above not following"
).split()

#: Chat templates with the layout of each family's released template (the question may come before the
#: image: the content items are emitted in the order given).
_QWEN2_TEMPLATE = (
    "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_QWEN3_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _idefics_template(begin: str) -> str:
    return (
        begin + "{% for m in messages %}{{ m['role'] | capitalize }}"
        "{% if m['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
        "{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}"
        "{% elif c['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
        "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
    )


_QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>")
_QWEN_MEDIA = ("<|image_pad|>", "<|video_pad|>")
_IDEFICS_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|begin_of_text|>",
    "<end_of_utterance>",
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    "<video>",
    *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)),
)


def make_tokenizer(specials: tuple[str, ...], *, eos: str, pad: str, bos: str | None = None):
    """A byte-level BPE tokenizer built in memory: ``specials`` first (ids 0, 1, ...), then the byte
    alphabet and the common words of :data:`_WORDS` as single tokens (no merges); with ``bos`` (one of
    ``specials``), a post-processor that puts it before every text, as a Llama tokenizer does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for token in specials:
        vocab[token] = len(vocab)
    for token in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab.setdefault(token, len(vocab))
    for word in _WORDS:
        for form in (word, word.capitalize()):
            for spelled in (form, "\u0120" + form):  # "Ġ": the byte-level form of a leading space
                vocab.setdefault(spelled, len(vocab))
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], ignore_merges=True))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    if bos is not None:
        core.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        additional_special_tokens=[token for token in specials[1:] if token != bos],
    )


@dataclasses.dataclass(frozen=True)
class TinyJudge:
    """A tiny judge's recipe: its family's model type and the builders of its parts."""

    name: str
    model_type: str
    build: Callable[[], tuple[Any, Any]]  # () -> (config, processor)


def _ids(tokenizer, *tokens: str) -> dict[str, int]:
    return {token: tokenizer.convert_tokens_to_ids(token) for token in tokens}


_TEXT = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=32768,  # Qwen2-VL-2B's: an episode's frames fit
)


def _qwen(model_type: str):
    def build():
        import transformers as tf

        tokenizer = make_tokenizer(
            _QWEN_SPECIALS + _QWEN_MEDIA, eos="<|im_end|>", pad="<|endoftext|>", bos="<|endoftext|>"
        )
        ids = _ids(tokenizer, *_QWEN_MEDIA, "<|vision_start|>", "<|vision_end|>")
        tokens = dict(
            image_token_id=ids["<|image_pad|>"],
            video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"],
            vision_end_token_id=ids["<|vision_end|>"],
        )
        text = dict(  # no padding row: the start token (<|endoftext|>, id 0) needs an embedding of its own
            _TEXT, vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=None
        )
        rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]}
        if model_type == "qwen2_vl":
            config = tf.Qwen2VLConfig(
                text_config=dict(text, rope_parameters=rope),
                vision_config=dict(depth=2, embed_dim=32, hidden_size=32, num_heads=4, mlp_ratio=2),
                **tokens,
            )
            processor = tf.Qwen2VLProcessor(
                tf.Qwen2VLImageProcessor(), tokenizer, tf.Qwen2VLVideoProcessor(), chat_template=_QWEN2_TEMPLATE
            )
        elif model_type == "qwen2_5_vl":
            config = tf.Qwen2_5_VLConfig(
                text_config=dict(text, rope_parameters=rope),
                vision_config=dict(
                    depth=2,
                    hidden_size=32,
                    intermediate_size=64,
                    num_heads=4,
                    out_hidden_size=32,
                    window_size=56,
                    fullatt_block_indexes=[1],
                ),
                **tokens,
            )
            processor = tf.Qwen2_5_VLProcessor(
                tf.Qwen2VLImageProcessor(), tokenizer, tf.Qwen2VLVideoProcessor(), chat_template=_QWEN2_TEMPLATE
            )
        else:  # qwen3_vl: 16 px patches, 0.5 mean and std, at least 256 x 256 pixels (Qwen3-VL's processor)
            config = tf.Qwen3VLConfig(
                text_config=dict(
                    text, head_dim=8, rope_parameters=dict(rope, mrope_interleaved=True, mrope_section=[2, 1, 1])
                ),
                vision_config=dict(
                    depth=2,
                    hidden_size=32,
                    intermediate_size=64,
                    num_heads=4,
                    out_hidden_size=32,
                    num_position_embeddings=64,
                    deepstack_visual_indexes=[0],
                ),
                **tokens,
            )
            image_processor = tf.Qwen2VLImageProcessor(
                patch_size=16,
                image_mean=[0.5, 0.5, 0.5],
                image_std=[0.5, 0.5, 0.5],
                size={"shortest_edge": 65536, "longest_edge": 16777216},
            )
            processor = tf.Qwen3VLProcessor(
                image_processor, tokenizer, tf.Qwen3VLVideoProcessor(), chat_template=_QWEN3_TEMPLATE
            )
        return config, processor

    return build


def _idefics(model_type: str):
    def build():
        import transformers as tf

        begin = "<|im_start|>" if model_type == "smolvlm" else "<|begin_of_text|>"  # what the template starts with
        tokenizer = make_tokenizer(_IDEFICS_SPECIALS, eos="<end_of_utterance>", pad="<|endoftext|>", bos=begin)
        image_token_id = tokenizer.convert_tokens_to_ids("<image>")
        tile = 32  # the vision tower's input: 16 patches of 8 px, 4 tokens after the pixel shuffle
        text = dict(_TEXT, vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=None, pad_token_id=0)
        vision = dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            image_size=tile,
            patch_size=8,
        )
        sizes = dict(size={"longest_edge": 2 * tile}, max_image_size={"longest_edge": tile})
        if model_type == "smolvlm":
            config = tf.SmolVLMConfig(
                text_config=text, vision_config=vision, image_token_id=image_token_id, scale_factor=2
            )
            processor = tf.SmolVLMProcessor(
                tf.SmolVLMImageProcessor(**sizes),
                tokenizer,
                tf.SmolVLMVideoProcessor(),
                image_seq_len=4,
                chat_template=_idefics_template(begin),
            )
        else:
            config = tf.Idefics3Config(
                text_config=text, vision_config=vision, image_token_id=image_token_id, scale_factor=2
            )
            processor = tf.Idefics3Processor(
                tf.Idefics3ImageProcessor(**sizes),
                tokenizer,
                image_seq_len=4,
                chat_template=_idefics_template(begin),
            )
        return config, processor

    return build


#: The tiny judges by name, one per family.
TINY_JUDGES: dict[str, TinyJudge] = {
    judge.name: judge
    for judge in (
        TinyJudge("vlmrm-tiny-qwen2-vl", "qwen2_vl", _qwen("qwen2_vl")),
        TinyJudge("vlmrm-tiny-qwen2.5-vl", "qwen2_5_vl", _qwen("qwen2_5_vl")),
        TinyJudge("vlmrm-tiny-qwen3-vl", "qwen3_vl", _qwen("qwen3_vl")),
        TinyJudge("vlmrm-tiny-smolvlm", "smolvlm", _idefics("smolvlm")),
        TinyJudge("vlmrm-tiny-idefics3", "idefics3", _idefics("idefics3")),
    )
}
