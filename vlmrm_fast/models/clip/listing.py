"""``vlmrm-fast models``: the families and their sizes, from the shipped table or measured now."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from vlmrm_fast.models.clip.families import FAMILIES, describe, model_table

_COLUMNS = ("model", "px", "dim", "img Mparams", "img GFLOPs", "tags", "needs")


def rows(names: Sequence[str] = (), family: str | None = None) -> dict[str, dict[str, Any]]:
    """name -> entry: the shipped table's (all architectures), or measured now for ``names``."""
    if names:
        found = {}
        for name in names:
            entry = describe(name)
            found[entry.pop("name")] = entry
    else:
        found = {name: dict(entry) for name, entry in model_table().items()}
    return {name: entry for name, entry in found.items() if family is None or entry.get("family") == family}


#: What the shipped table says of a model whose text tower's config had to come from the Hugging Face hub
_HUB_ERROR = "couldn't connect to"


def _unmeasured(failed: dict[str, dict[str, Any]]) -> str:
    """One line for the models without sizes: the shipped table's hub-configured text towers, or those
    measured now that failed (each with its reason)."""
    hub = sorted(name for name, entry in failed.items() if _HUB_ERROR in entry["error"])
    others = [f"{name} ({entry['error']})" for name, entry in sorted(failed.items()) if name not in hub]
    parts = []
    if hub:
        parts.append(
            f"{', '.join(hub)}: their text tower's config comes from the Hugging Face hub; `vlmrm-fast models NAME` "
            f"measures one where the hub can be reached"
        )
    return "; ".join(parts + others)


def print_models(names: Sequence[str] = (), *, family: str | None = None, as_json: bool = False) -> int:
    found = rows(names, family)
    if as_json:
        print(json.dumps(found, indent=2, sort_keys=True))
        return 0
    failed = {name: entry for name, entry in found.items() if "error" in entry}
    for fam in FAMILIES:
        members = [(n, e) for n, e in found.items() if e.get("family") == fam.key]
        if not members:
            continue
        print(f"\n{fam.name} ({fam.key}): {fam.what}")
        table = [_COLUMNS] + [
            (
                name,
                str(e["image_size"]),
                str(e["embed_dim"]),
                f"{e['image_params_m']:.1f}",
                f"{e['image_gflops']:.1f}",
                str(len(e.get("pretrained_tags", []))),
                ",".join(e.get("needs", [])) or "-",
            )
            for name, e in sorted(members, key=lambda item: item[1]["image_gflops"])
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(_COLUMNS))]
        for row in table:
            print(
                "  "
                + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
            )
    if failed:
        print(f"\nnot measured: {_unmeasured(failed)}")
    print(
        "\npx: input size; dim: embedding size; img GFLOPs: image tower, one image (a multiply-add is 2 FLOPs); "
        "tags: pretrained tags (name/tag); needs: extras (pip install 'vlmrm-fast[siglip]' or '[timm]')"
    )
    return 0
