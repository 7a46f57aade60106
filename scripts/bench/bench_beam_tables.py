"""The docs table of scripts/bench/bench_beam.py: users/s per decoder and the ratios of one run."""
from __future__ import annotations


def tables(files: list[dict]) -> list[str]:
    """The beam-search benchmark (scripts/bench/bench_beam.py): users/s per decoder and the ratios of one run."""
    out = []
    for r in files:
        if r.get("kind") != "bench_beam":
            continue
        variants = list(dict.fromkeys(x["variant"] for x in r["rows"]))
        speed = {(x["model"], x["beam"], x["variant"]): x for x in r["rows"]}
        env = r["environment"]
        out += ["## Beam search speed", "",
                f"`results/{r['name']}.json` (`scripts/bench/bench_beam.py`, commit `{r['commit'][:12]}`): users/s "
                f"decoding {r['rows'][0]['users']} {r['dataset']} test users (real histories, batches of "
                f"{r['args']['batch_size']}, top-k = beam; fastest of {r['args'].get('repeats', 1)} runs) on "
                f"{r['args']['threads']} CPU thread(s) of a shared "
                f"machine (torch {env['torch']}); randomly initialised models of the Beauty presets over the SID table "
                f"`{r['sid_table']}`. `naive`: no KV cache and the allowed codes found by comparing every beam's "
                "prefix with every semantic ID; `no_cache` / `brute_force`: one of the two; `genrec`: KV cache + "
                "tensor prefix trie; `unconstrained`: KV cache, no constraint.", "",
                "| model | beam | " + " | ".join(variants) + " | genrec / naive | cache alone | trie alone "
                "| constrained / unconstrained |",
                "|---|---|" + "---|" * (len(variants) + 4)]
        for q in r["ratios"]:
            cells = [f"{speed[(q['model'], q['beam'], v)]['users_per_s']:.1f}" for v in variants]
            out.append(f"| {q['model']} | {q['beam']} | " + " | ".join(cells) + f" | {q['genrec_vs_naive']:.1f}x | "
                       f"{q['cache_alone']:.1f}x | {q['trie_alone']:.1f}x | {q['constrained_vs_unconstrained']:.2f}x |")
        prefill = [f"{m} {x['prefill_users_per_s']:.1f} users/s "
                   f"({speed[(m, 20, 'genrec')]['users_per_s'] / x['prefill_users_per_s']:.0%} of genrec's decoding "
                   "time at beam 20)" for m, x in r["settings"].items()
                   if "prefill_users_per_s" in x and (m, 20, "genrec") in speed]
        longest = {m: x["max_len"] * len(x["codebook_sizes"]) + 1 for m, x in r["settings"].items()}
        if prefill:
            out += ["", "genrec's prefill alone (TIGER: the encoder and the cross-attention keys/values; decoder-only: "
                    "the history's keys/values), paid once per user whatever the beam: " + ", ".join(prefill)
                    + ". The naive TIGER decoder runs the encoder once per user too (as `transformers`' `generate` "
                    "does without a cache), so it pays the same prefill. TIGER's decoder is 4 tokens long: without a "
                    "cache it recomputes those few tokens and the "
                    "cross-attention keys/values at every step, while the feed-forward work of every beam stays the "
                    "same, so a cache saves less than on the decoder-only model, whose naive decoder re-runs the "
                    f"whole history (up to {longest.get('sid_gpt', '?')} tokens) at every step of every beam."]
        at20 = [q for q in r["ratios"] if q["beam"] == 20]
        if at20:
            met = ", ".join(f"{q['model']} {q['genrec_vs_naive']:.1f}x "
                            f"({'met' if q['genrec_vs_naive'] >= 10 else 'NOT met'})" for q in at20)
            out += ["", f"Goal: genrec ≥ 10x the naive decoder at beam 20: {met}."]
        compared = [x for x in r["rows"] if "same_items_as_genrec" in x]
        differ = [f"{x['model']} beam {x['beam']} {x['variant']}" for x in compared if not x["same_items_as_genrec"]]
        worst = max(x["max_score_diff_vs_genrec"] for x in compared)
        out += ["", "Every constrained variant decodes what genrec's does: "
                + (f"the same items, except {', '.join(differ)}, where items with near-equal scores swap places; "
                   if differ else "the same items; ")
                + f"the scores of the lists agree within {worst:.1g} (float32, cached vs uncached).", ""]
    return out
