#!/usr/bin/env python3
"""Writes vlmrm_fast/models/clip/model_table.json: every open_clip architecture's family, input size,
embedding size, image-tower parameters and GFLOPs per image (``vlmrm-fast models`` prints it).

Each model is built on the meta device (no weights, no memory) and its image tower run once under
torch's FLOP counter (vlmrm_fast.models.clip.families.describe), a few minutes for all of them. Run it
again after upgrading open_clip or timm:

    python3 tools/generate_model_table.py            # rewrite the table
    python3 tools/generate_model_table.py --check    # exit 1 if the table differs from a fresh one
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build() -> dict:
    import open_clip
    import timm
    import torch
    from tqdm import tqdm

    from vlmrm_fast.models.clip.families import describe
    from vlmrm_fast.models.clip.names import known_models

    models = {}
    for name in tqdm(known_models(), desc="architectures", unit="model"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                entry = describe(name)
            entry.pop("name")
            models[name] = entry
        except Exception as exc:  # a tower whose config needs the hub (HF text towers), or a broken config
            models[name] = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}"}
    return {
        "generated_with": {"open_clip": open_clip.__version__, "timm": timm.__version__, "torch": torch.__version__},
        "models": models,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the checked-in table instead of writing")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # open_clip logs one line per randomly initialised model
    from vlmrm_fast.models.clip.families import MODEL_TABLE

    text = json.dumps(build(), indent=1, sort_keys=True) + "\n"
    if args.check:
        if MODEL_TABLE.read_text() != text:
            print(f"{MODEL_TABLE} is stale: run python3 tools/generate_model_table.py", file=sys.stderr)
            return 1
        return 0
    MODEL_TABLE.write_text(text)
    print(f"wrote {MODEL_TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
