"""Semantic-ID tokenizer runs (``genrec-tokenize results_name=...``): the health of each SID table."""
from __future__ import annotations

from scripts.docs.tables.common import _commits, prose


def _levels(levels: list[dict], key: str, fmt: str) -> str:
    return " / ".join(format(level[key], fmt) for level in levels)


def tables(files: list[dict]) -> list[str]:
    """One table for every semantic-ID tokenizer run (files written by ``genrec-tokenize results_name=...``)."""
    runs = sorted((r for r in files if r.get("kind") == "tokenize"),
                  key=lambda r: (r["dataset"]["dataset"], r["tokenizer"], r["name"]))
    if not runs:
        return []
    out = ["## Semantic-ID tokenizers", "",
           prose("tokenizers", "intro"), "",
           "| dataset | items | encoder | method | collisions | codebook sizes | usage per level | entropy per level "
           "| colliding before | after | reconstruction error | seed | fit s | source |",
           "|---|" + "---|" * 13]
    for r in runs:
        h = r["health"]
        semantic = [level for level in h["levels"] if level["kind"] == "semantic"]
        before, after = h["collisions_before"], h["collisions_after"]
        encoder = r["encoder"]
        encoder_name = f"{encoder['name']} {encoder['dim']}-d" + (f" ({encoder['model']})" if "model" in encoder
                                                                  else "")
        out.append(f"| {r['dataset']['dataset']} | {h['items']:,} | {encoder_name} | {r['tokenizer']} | "
                   f"{r['collisions']} | {' x '.join(str(k) for k in r['sid_table']['codebook_sizes'])} | "
                   f"{_levels(semantic, 'usage', '.1%')} | {_levels(semantic, 'normalized_entropy', '.3f')} | "
                   f"{before['colliding_items']:,} ({before['collision_rate']:.2%}) | {after['colliding_items']} | "
                   f"{h['reconstruction']['relative']:.4f} | {r['seed']} | {r['seconds']['fit_and_resolve']:.0f} | "
                   f"`results/{r['name']}.json` |")
    notes = sorted({(r["dataset"]["dataset"], r["encoder"].get("items_without_text", 0)) for r in runs
                    if r["encoder"].get("items_without_text")})
    out.append("")
    for dataset, count in notes:
        out.append(f"{dataset}: {count} items have no text; their raw item IDs stand in as text "
                   "(`encoder.on_empty=raw_id`).")
    out += ["", f"Commits: {_commits(runs)}.", ""]
    return out
