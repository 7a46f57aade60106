"""The docs table of scripts/analysis/diagnose_generator.py: where a generator falls behind a retrieval model, per
code level.
"""
from __future__ import annotations

from scripts.docs.tables.common import prose


def tables(files: list[dict]) -> list[str]:
    """Where a generator falls behind a retrieval model, per code level (scripts/analysis/diagnose_generator.py)."""
    out = []
    for r in (f for f in files if f.get("kind") == "diagnose_generator"):
        gen, teacher = r["generator"], r["teacher"]
        item = r["item_nats"]
        out += [f"## Why the generator trails {teacher['model']}: nats per code level, {r['dataset']['dataset']} "
                f"(`results/{r['name']}.json`)", "",
                f"`python -m scripts.analysis.diagnose_generator`: the generator of `{gen['run']}` ({gen['model']}) "
                "and the "
                f"retrieval model of `{teacher['run']}` ({teacher['model']}), best checkpoints. For each target, the "
                "negative log-likelihood (nats) of its code at each level given its true prefix: the generator's "
                "own softmax (teacher-forced), and the retrieval model's softmax over every item summed by code "
                "prefix (what a generator reproducing its item probabilities exactly would put on each code). The "
                "levels add up to each model's -log p(target item). Test: every test user's target "
                f"({item['test']['targets']:,}); training: every position with an input of the first "
                f"{r['train_batches']} training batches ({item['train']['targets']:,} targets). Top-1: the share of "
                "targets whose code is the most likely valid one at that level. Valid codes: those that continue the "
                "target's prefix to some item (constrained decoding masks the others; the generator's raw softmax "
                "spends the rest of its mass on them). Items under the prefix: how many items share the test "
                "target's codes before that level (mean over targets).", "",
                "| level (codes) | test nats: generator | generator, valid codes only | generator's mass on valid "
                "codes | test nats: retrieval | gap (valid codes) | train nats: generator | train nats: retrieval | "
                "gap | test top-1: generator | test top-1: retrieval | items under the prefix |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for level in r["levels"]:
            test, train = level["test"], level["train"]
            out.append(f"| {level['level']} ({level['codebook_size']}) | {test['generator_nats']:.3f} | "
                       f"{test['generator_valid_nats']:.3f} | {test['generator_valid_mass']:.3f} | "
                       f"{test['teacher_nats']:.3f} | {test['generator_valid_nats'] - test['teacher_nats']:+.3f} | "
                       f"{train['generator_nats']:.3f} | {train['teacher_nats']:.3f} | "
                       f"{train['generator_nats'] - train['teacher_nats']:+.3f} | {test['generator_top1']:.3f} | "
                       f"{test['teacher_top1']:.3f} | {level['test_items_under_prefix']:,.1f} |")
        out.append(f"| **item** | {item['test']['generator']:.3f} | {item['test']['generator_valid']:.3f} | – | "
                   f"{item['test']['teacher']:.3f} | {item['test']['generator_valid'] - item['test']['teacher']:+.3f} "
                   f"| {item['train']['generator']:.3f} | {item['train']['teacher']:.3f} | "
                   f"{item['train']['generator'] - item['train']['teacher']:+.3f} | – | – | 1 |")
        decoding = r["decoding"]
        out += ["", f"Decoding: the generator's beam, the same renormalised over the allowed codes at every level, "
                f"and a wider beam, on {decoding['sample_users']:,} test users drawn "
                f"with seed {decoding['seed']} (history removed, constrained by the prefix trie):", "",
                "| beam | recall@5 | ndcg@5 | recall@10 | ndcg@10 |", "|---|---|---|---|---|"]
        for row in decoding["rows"]:
            name = f"{row['beam']}{', renormalised' if row.get('renormalize') else ''}"
            out.append(f"| {name} | " + " | ".join(f"{row[c]:.4f}" for c in ("recall@5", "ndcg@5", "recall@10",
                                                                             "ndcg@10")) + " |")
        out += ["", f"Commit `{r['commit'][:12]}`; {r['seconds']['levels']:.0f} s for the levels, "
                f"{r['seconds']['decoding']:.0f} s for the decoding, {r['threads']} thread(s).", ""]
    return out + ([prose("diagnosis")] if out else [])
