"""Generative VLMs as judges: the model families, their adapters, loading by name (docs/judge.md).

    families.py   the supported families by model_type (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, SmolVLM, Idefics3),
                  the refusal of a model that is no judge, the transformers extra
    adapter.py    what a family supplies: image processing on the device, the vision tower, positions
    qwen.py       the Qwen families' adapter (patches, multimodal RoPE)
    idefics.py    SmolVLM's and Idefics3's adapter (tiles, a global image)
    prompt.py     a question's prompt from the model's chat template (an order, a number of frames), split
                  where the frames enter it; answer tokens
    load.py       a judge by name (tiny, folder, hub; its config read before its weights), what a model
                  name is, the cache and the download line, the tiling processors' settings
    tiny.py       tiny random judges of each family, built offline
    fp8.py        FP8 linear layers through torchao

The reward model itself (frames -> rewards) is :class:`vlmrm_fast.reward.judge.JudgeRewardModel`.
"""

from vlmrm_fast.models.judge.families import JUDGE_FAMILIES, JudgeFamily, judge_family
from vlmrm_fast.models.judge.judge_models import LoadedJudge, is_judge_name, judge_folder, load_judge
from vlmrm_fast.models.judge.tiny import TINY_JUDGES

__all__ = [
    "JUDGE_FAMILIES",
    "TINY_JUDGES",
    "JudgeFamily",
    "LoadedJudge",
    "is_judge_name",
    "judge_family",
    "judge_folder",
    "load_judge",
]
