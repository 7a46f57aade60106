"""Post-training stages of the SID generator against their control (scripts/recipes/reproduce_post_training.sh), one
section per dataset it ran on: docs/results/generative.md.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

from scripts.analysis import negatives_heldout_tables
from scripts.analysis.negatives_heldout_tables import _negatives_label
from scripts.docs.tables.common import _budget, _cell, _commits, below_baselines, prose


#: results-file prefix of scripts/recipes/reproduce_post_training.sh -> the data it ran on (DATASET=beauty:
#: beauty_post_)
POST_PREFIXES = {"post_": "synthetic", "beauty_post_": "beauty", "scientific_post_": "scientific"}


#: the Amazon datasets the script runs on (its DATASET) -> their names in prose
AMAZON_NAMES = {"beauty": "Amazon Beauty 2014", "scientific": "Amazon Industrial & Scientific 2018"}


POST_STAGES = {"sasrec": "SASRec (the teacher; its item table made the SIDs)", "sft": "SID-GPT, SFT",
               "sft_cosine": "SID-GPT, SFT with a cosine learning-rate decay",
               "sft_cosine_items": "SID-GPT with item-ID inputs, SFT with a cosine learning-rate decay",
               "sft_conv": "SID-GPT, SFT to early stopping",
               "sft_distill": "SID-GPT, SFT with distillation from SASRec from the first step",
               "sft_items": "SID-GPT with an item head re-ranking its beam, SFT",
               "sft_items_distill": "SID-GPT with an item head re-ranking its beam, SFT with distillation from SASRec "
                                    "from the first step",
               "sft_items_tied": "SID-GPT with item-ID inputs and an item head tied to them, re-ranking its beam, SFT",
               "sft_items_tied_distill": "SID-GPT with item-ID inputs and an item head tied to them, re-ranking its "
                                         "beam, SFT with distillation from SASRec from the first step",
               "sft_items_tied_hdistill": "SID-GPT with item-ID inputs and an item head tied to them, re-ranking its "
                                          "beam, SFT with distillation from SASRec into the codes and the item head "
                                          "from the first step",
               "sft_items_tied_hdistill_cosine": "SID-GPT with item-ID inputs and an item head tied to them, "
                                                 "re-ranking its beam, SFT with distillation from SASRec into the "
                                                 "codes and the item head from the first step, cosine learning-rate "
                                                 "decay",
               "sft_more": "SFT + continued SFT (control)", "dpo": "SFT + DPO (1 negative)",
               "sdpo": "SFT + S-DPO", "sdpo_sft": "SFT + S-DPO with the next-token loss (sft_weight 1)",
               "sdpo_sft_beam": "SFT + S-DPO with the next-token loss, beam (hard) negatives",
               "sdpo_beam": "SFT + S-DPO, beam (hard) negatives",
               "sdpo_seq_beam": "SFT + S-DPO + the control's next-token loss, beam (hard) negatives",
               "sdpo_seq": "SFT + S-DPO + the control's next-token loss",
               "sdpo_seq_dropout": "SFT + S-DPO + the control's next-token loss, dropout on as in the control",
               "sdpo_seq_beta1": "SFT + S-DPO (beta 1) + the control's next-token loss",
               "sdpo_all": "SFT + S-DPO, preference examples at every position",
               "sdpo_seq_all": "SFT + S-DPO with preference examples at every position + the control's next-token "
                               "loss",
               "sdpo_sampled": "SFT + S-DPO, negatives sampled from the SFT model",
               "sdpo_seq_sampled": "SFT + S-DPO + the control's next-token loss, negatives sampled from the SFT model",
               "sdpo_seq_rank": "SFT + S-DPO on the ranking scores + the control's next-token loss",
               "sdpo_seq_rank_beam": "SFT + S-DPO on the ranking scores + the control's next-token loss, the "
                                     "model's own top recommended wrong items as negatives",
               "sdpo_seq_rank_beam_skip10": "SFT + S-DPO on the ranking scores + the control's next-token loss, the "
                                            "model's own recommended wrong items ranked 11-18 as negatives",
               "sft_more_nodrop": "SFT + continued SFT without dropout (as the alignment stages train)",
               "distill": "SFT + distillation from SASRec",
               "llm_full": "LLM backbone (llama, random init), full fine-tuning",
               "llm_lora": "LLM backbone (llama, random init), LoRA"}


#: the preference-alignment stages (POST_STAGES keys), in table order
ALIGN_STAGES = ("dpo", "sdpo", "sdpo_beam", "sdpo_sft", "sdpo_sft_beam", "sdpo_seq", "sdpo_seq_beam",
                "sdpo_seq_dropout", "sdpo_seq_beta1", "sdpo_all", "sdpo_seq_all", "sdpo_sampled", "sdpo_seq_sampled",
                "sdpo_seq_rank", "sdpo_seq_rank_beam", "sdpo_seq_rank_beam_skip10")


#: run-name suffixes of the script's variants (its SFT_TAG and STAGE_TAG) after a POST_STAGES name -> what they change
POST_TAGS = {"_conv": "from an SFT run trained to early stopping", "_lr5e-5": "lr 5e-5", "_ep12": "12 epochs",
             "_distill": "from SFT with distillation",
             "_items_tied_hdistill": "from the tied item-head SFT run distilled into codes and head",
             "_guided05": "trained and selected under the beam steered by the item head at code weight 0.5",
             "_guided0": "trained and selected under the beam steered by the item head at code weight 0"}


#: SFT variants against the training they change one thing of: (the paragraph's intro, [(control, variant), ...])
SFT_COMPARISONS = [
    ("Distillation from the first step against plain SFT (same seed, learning rate and epoch cap; early stopping may "
     "end either first; the student's compute per step is the same):", [("sft", "sft_distill")]),
    ("The item head tied to item-ID inputs (`model.generator.item_inputs=true model.generator.tie_item_tables=true`) "
     "against the item head with a table of its own (same seed, learning rate, epoch cap and SID table):",
     [("sft_items", "sft_items_tied"), ("sft_items_distill", "sft_items_tied_distill")]),
    ("Distillation into the item head as well (`distill.item_head_weight=1`) against distillation into the codes "
     "alone, and a cosine learning-rate decay against the constant rate (same seed, epoch cap and SID table):",
     [("sft_items_tied_distill", "sft_items_tied_hdistill"),
      ("sft_items_tied_hdistill", "sft_items_tied_hdistill_cosine")]),
]


#: the margin issue 16 asks of S-DPO over continued SFT in NDCG@10
GOAL_SDPO = 0.05


def _post_prefix(run: dict) -> str | None:
    """The post-training prefix of a results file's name (longest match), None for other files."""
    return max((p for p in POST_PREFIXES if run.get("name", "").startswith(p)), key=len, default=None)


def _stage(run: dict) -> str:
    return run["name"][len(_post_prefix(run)):run["name"].rindex("_seed")]


def _split_tags(stage: str) -> tuple[str, list[str]]:
    """A stage's name -> its POST_STAGES name and the POST_TAGS suffixes after it (``sdpo_seq_conv_lr5e-5`` ->
    ``sdpo_seq``, ``[_conv, _lr5e-5]``); an unknown name comes back whole."""
    base, tags = stage, []
    while base not in POST_STAGES:
        tag = next((t for t in POST_TAGS if base.endswith(t)), None)
        if tag is None:
            return stage, []
        base, tags = base[:-len(tag)], [tag, *tags]
    return base, tags


def _stage_label(stage: str) -> str:
    base, tags = _split_tags(stage)
    return POST_STAGES.get(base, stage) + "".join(f", {POST_TAGS[t]}" for t in tags)


def _stage_order(stage: str) -> tuple[int, list[str]]:
    """Table order: by POST_STAGES, each stage's tagged variants after it."""
    base, tags = _split_tags(stage)
    return list(POST_STAGES).index(base) if base in POST_STAGES else len(POST_STAGES), tags


def _stages_of(by_stage: dict[str, list[dict]], bases) -> list[str]:
    """The stages of ``by_stage`` whose POST_STAGES name is one of ``bases``, in table order."""
    return sorted((s for s in by_stage if _split_tags(s)[0] in bases), key=_stage_order)


def _dropout_off(run: dict) -> bool:
    """Whether a post-training run trained without dropout (an alignment stage's default, or the control
    ``sft_more_nodrop``)."""
    return bool((run.get("align") or {}).get("disable_dropout")) or _stage(run).startswith("sft_more_nodrop")


def _add_comparisons(out: list[str], by_stage: dict[str, list[dict]], comparisons: list) -> None:
    """Append each of ``comparisons`` (:data:`SFT_COMPARISONS` entries) that has a pair of runs to ``out``."""
    for intro, pairs in comparisons:
        lines = [line for control, stage in pairs for line in _against_control(by_stage, control, stages=(stage,))]
        if lines:
            out += [intro, ""] + lines + [""]


def _paired(runs: list[dict], controls: list[dict]) -> list[tuple[dict, dict]]:
    """Each of ``runs`` with the run of ``controls`` from the same SFT run (its folder's name without the seed; none
    for runs from scratch), seed, learning rate and epoch cap, where there is one."""
    def start(run: dict) -> tuple:
        checkpoint = (run.get("init_from") or {}).get("checkpoint")
        sft = Path(checkpoint).parent.parent.name.rsplit("-", 1)[0] if checkpoint else None
        epochs = run["config"].get("trainer", {}).get("max_epochs")
        return sft, run["seed"], run["config"]["optim"]["lr"], epochs

    control = {start(r): r for r in controls}
    return [(r, control[start(r)]) for r in runs if start(r) in control]


def _changes(paired: list[tuple[dict, dict]]) -> list[float]:
    """Test NDCG@10 of each run against its control's, as a relative change."""
    return [r["metrics"]["test"]["ndcg@10"] / c["metrics"]["test"]["ndcg@10"] - 1 for r, c in paired]


def _matched(paired: list[tuple[dict, dict]]) -> bool:
    """Whether every pair trained with or without dropout alike (the control that judges an alignment stage)."""
    return all(_dropout_off(r) == _dropout_off(c) for r, c in paired)


def _against_control(by_stage: dict[str, list[dict]], control_stage: str,
                     stages=(*ALIGN_STAGES, "sft_more_nodrop", "distill")) -> list[str]:
    """One line per stage of ``stages`` (POST_STAGES names): its test NDCG@10 against ``control_stage``'s run of the
    same start (:func:`_paired`); the S-DPO goal is judged against the matched control only (the one that trains with
    or without dropout as the stage does)."""
    lines = []
    for stage in _stages_of(by_stage, stages):
        paired = _paired(by_stage[stage], by_stage.get(control_stage, []))
        if not paired or stage == control_stage:
            continue
        changes, matched = _changes(paired), _matched(paired)
        verdict = ""
        if stage.startswith("sdpo") and matched:
            verdict = (" — goal (+{:.0%}) {}".format(GOAL_SDPO, "met" if statistics.mean(changes) >= GOAL_SDPO
                                                        else "**not** met"))
        lines.append(f"- `{_stage_label(stage)}`{'' if matched else ' (dropout differs)'} vs "
                     f"`{_stage_label(control_stage)}`, test NDCG@10 per seed "
                     f"({', '.join(f'{c:+.1%}' for c in changes)}): mean **{statistics.mean(changes):+.1%}**"
                     f"{verdict}.")
    return lines


def _runs_by_stage(runs: list[dict]) -> dict[str, list[dict]]:
    """Post-training results -> their stage name (with its tags) -> its runs, by seed."""
    by_stage = defaultdict(list)
    for r in sorted(runs, key=lambda r: r["seed"]):
        by_stage[_stage(r)].append(r)
    return by_stage


def tables(files: list[dict]) -> list[str]:
    """Post-training stages of the SID generator against their control (scripts/recipes/reproduce_post_training.sh), one
    section per dataset it ran on, without the arms moved to results/archive/ (``archived``: the readings computed
    from the files still read them), then one table of those (:func:`superseded_table`)."""
    out = []
    for prefix in POST_PREFIXES:
        runs = [r for r in files if _post_prefix(r) == prefix and "metrics" in r]
        shown = [r for r in runs if not r.get("archived")]
        if shown:
            out += _post_training_table(shown, prefix)
            out += skipped_negatives_reading(runs, files, POST_PREFIXES[prefix])
            out += negatives_heldout_tables.table(files, POST_PREFIXES[prefix])
    return out + superseded_table(files)


def _superseded(files: list[dict]) -> list[dict]:
    """The post-training arms in results/archive/, in table order: ``{"dataset", "stage", "runs", "control",
    "paired", "other", "other_paired"}``, ``control`` the matched control (continued SFT of the same start,
    :func:`_paired`, trained with or without dropout as the arm is) and ``other`` the one whose dropout differs (None
    where there is none)."""
    out = []
    for prefix, dataset in POST_PREFIXES.items():
        runs = [r for r in files if _post_prefix(r) == prefix and "metrics" in r]
        by_stage, archived = _runs_by_stage(runs), _runs_by_stage([r for r in runs if r.get("archived")])
        controls = _stages_of(by_stage, ("sft_more", "sft_more_nodrop"))
        for stage in sorted(archived, key=_stage_order):
            pairs = {c: _paired(archived[stage], by_stage[c]) for c in controls}
            matched = [c for c, paired in pairs.items() if paired and _matched(paired)]
            other = [c for c, paired in pairs.items() if paired and not _matched(paired)]
            out.append({"dataset": dataset, "stage": stage, "runs": archived[stage],
                        "control": matched[0] if matched else None, "paired": pairs[matched[0]] if matched else [],
                        "other": other[0] if other else None, "other_paired": pairs[other[0]] if other else []})
    return out


def _change_cell(paired: list[tuple[dict, dict]]) -> str:
    changes = _changes(paired)
    return f"{', '.join(f'{c:+.1%}' for c in changes)}: **{statistics.mean(changes):+.1%}**" if changes else "–"


def superseded_table(files: list[dict]) -> list[str]:
    """One table of the post-training arms moved to results/archive/: each arm's test NDCG@10 against its matched
    control and the other control, and what it did to the held-out target and its own preference examples."""
    arms = _superseded(files)
    if not arms:
        return []
    out = ["## Superseded post-training arms (raw files in results/archive/)", "", prose("post_training", "superseded"),
           "", "| arm | dataset | seeds | test ndcg@10 | matched control | its test ndcg@10 | change per seed: mean | "
           "against the other control (dropout differs) | test log p(target) | chosen / rejected log-ratio | source |",
           "|" + "---|" * 11]
    for arm in arms:
        runs = arm["runs"]
        stats = [r["align"]["tested_weights_on_training_examples"] for r in runs
                 if (r.get("align") or {}).get("tested_weights_on_training_examples")]
        ratios = (f"{statistics.mean(s['chosen_log_ratio'] for s in stats):+.4f} / "
                  f"{statistics.mean(s['rejected_log_ratio'] for s in stats):+.4f}" if stats else "–")
        tests = [r["metrics"]["test"] for r in runs]
        target = _cell([m["target_log_prob"] for m in tests if "target_log_prob" in m])
        control = f"`{arm['control']}`" if arm["control"] else "–"
        out.append(f"| {_stage_label(arm['stage'])} (`{arm['stage']}`) | {arm['dataset']} | "
                   f"{', '.join(str(r['seed']) for r in runs)} | "
                   f"{_cell([m['ndcg@10'] for m in tests])} | {control} | "
                   f"{_cell([c['metrics']['test']['ndcg@10'] for _, c in arm['paired']])} | "
                   f"{_change_cell(arm['paired'])} | {_change_cell(arm['other_paired'])} | {target} | {ratios} | "
                   + ", ".join(f"`results/archive/{r['name']}.json`" for r in runs) + " |")
    return out + ["", f"Commits: {_commits([r for arm in arms for r in arm['runs']])}.", ""]


def archived_arms(files: list[dict]) -> list[str]:
    """One line per arm in results/archive/ (results/archive/README.md): its files and why it is there, from its
    files and its matched control's."""
    lines = []
    for arm in _superseded(files):
        line = (f"- `{arm['stage']}` ({arm['dataset']}, {_stage_label(arm['stage'])}), "
                f"seed{'s' if len(arm['runs']) > 1 else ''} {', '.join(str(r['seed']) for r in arm['runs'])}: "
                + ", ".join(f"`{r['name']}.json`" for r in arm["runs"]))
        if not arm["paired"]:
            lines.append(line + "; no matched control in results/.")
            continue
        score = statistics.mean(r["metrics"]["test"]["ndcg@10"] for r, _ in arm["paired"])
        base = statistics.mean(c["metrics"]["test"]["ndcg@10"] for _, c in arm["paired"])
        lines.append(f"{line}. Test NDCG@10 {score:.4f} against {base:.4f} for its matched control `{arm['control']}` "
                     f"({statistics.mean(_changes(arm['paired'])):+.1%}): "
                     + ("lost to its control." if score <= base else "above its control."))
    return lines + [""]


def skipped_negatives_reading(runs: list[dict], files: list[dict], dataset: str,
                              tags: str = "_items_tied_hdistill_guided05") -> list[str]:
    """What passing over the model's top wrong items did (``sdpo_seq_rank_beam_skip10`` against the same stage
    with the top 8, ``sdpo_seq_rank_beam``, and their control), every figure from the results files."""
    by_stage = _runs_by_stage(runs)
    skipped, top, control = (by_stage.get(s + tags) for s in ("sdpo_seq_rank_beam_skip10", "sdpo_seq_rank_beam",
                                                              "sft_more_nodrop"))
    if not (skipped and top and control):
        return []
    control_of = {r["seed"]: r for r in control}
    if any(r["seed"] not in control_of for r in skipped):
        return []

    def ndcg(stage_runs: list[dict]) -> str:
        return _cell([r["metrics"]["test"]["ndcg@10"] for r in stage_runs])

    def stat(stage_runs: list[dict], key: str) -> float:
        return statistics.mean(r["align"]["tested_weights_on_training_examples"][key] for r in stage_runs)

    def heldout(stage_runs: list[dict]) -> str:
        names = {f"{_stage(r)}-{r['seed']}" for r in stage_runs}
        shares = [row["examples_rejecting_either"] for f in files if f.get("kind") == "negatives_heldout"
                  for row in f["runs"] if Path(row["run"]).name in names and row["dataset"]["dataset"] == dataset]
        return f"{min(shares):.1%}-{max(shares):.1%}" if shares else "not measured"

    changes = [r["metrics"]["test"]["ndcg@10"] / control_of[r["seed"]]["metrics"]["test"]["ndcg@10"] - 1
               for r in skipped]
    mean = statistics.mean(changes)
    skip = skipped[0]["config"]["align"]["beam_skip"]
    k = skipped[0]["config"]["align"]["num_negatives"]
    return [f"Passing over the model's top wrong items (`sdpo_seq_rank_beam_skip10`: `align.beam_skip={skip}`, the "
            f"wrong items it ranks {skip + 1}-{skip + k} rejected instead of 1-{k}, everything else as "
            f"`sdpo_seq_rank_beam`), {len(skipped)} seeds: test NDCG@10 {ndcg(skipped)} against its control's "
            f"{ndcg(control)} (per seed {', '.join(f'{c:+.1%}' for c in changes)}; mean {mean:+.1%}, "
            f"{'at or above' if mean >= GOAL_SDPO else 'below'} the {GOAL_SDPO:+.0%} goal), and {ndcg(top)} with "
            f"the top {k}. On the training examples its reward accuracy is {stat(skipped, 'reward_accuracy'):.2f} "
            f"(top {k}: {stat(top, 'reward_accuracy'):.2f}) and the rejected items' log-ratio "
            f"{stat(skipped, 'rejected_log_ratio'):+.2f} nats ({stat(top, 'rejected_log_ratio'):+.2f}); "
            f"{heldout(skipped)} of its examples reject the user's own validation or test target "
            f"({heldout(top)} with the top {k}; the held-out table below).{_skip_verdict(skipped, top, mean)}", ""]


def _skip_verdict(skipped: list[dict], top: list[dict], change: float) -> str:
    """The reading of :func:`skipped_negatives_reading`'s figures, where they say it (``change``: the mean change
    against the control)."""
    def mean(runs: list[dict]) -> float:
        return statistics.mean(r["metrics"]["test"]["ndcg@10"] for r in runs)
    if mean(skipped) > mean(top) and abs(change) < 0.02:
        return (" Passing over the top wrong items recovers what the top ones cost, but the stage is then level "
                "with its control, as with popularity negatives: the control's full softmax already trains "
                "against these items.")
    return ""


def _post_training_table(runs: list[dict], prefix: str) -> list[str]:
    by_stage = _runs_by_stage(runs)
    first = (by_stage.get("sft") or runs)[0]
    summary, config = first["dataset"], first["config"]
    if any(r["dataset"] != summary for r in runs):
        raise ValueError("post-training results on different datasets: " + ", ".join(r["name"] for r in runs))
    reader = config["data"]["reader"]
    columns = ["recall@5", "ndcg@5", "recall@10", "ndcg@10"]
    dataset = POST_PREFIXES[prefix]
    if dataset in AMAZON_NAMES:
        heading = [f"## Post-training of the SID generator: stages against their control, {summary['dataset']}", "",
                 f"`DATASET={dataset} scripts/recipes/reproduce_post_training.sh`: {AMAZON_NAMES[dataset]} "
                 f"({summary['users']:,} users, {summary['items']:,} items, {summary['interactions']:,} "
                 "interactions), leave-one-out, full-corpus ranking, history removed; test split, best validation "
                 f"checkpoint. The genrec presets: teacher `experiment={dataset}_sasrec`, SIDs from RQ-VAE (3 x 256 + "
                 "a collision level) on its item table (collaborative, as in Beauty's SID-source table), generator "
                 f"`experiment={dataset}_sid_gpt`. Every stage starts from the SFT run's best checkpoint and trains "
                 "the same number of epochs with the same optimizer; the control continues next-token training. One "
                 "CPU thread per run, two runs side by side on the 2-core machine. Epoch caps were set by the time "
                 "left, not by convergence.", ""]
    else:
        heading = ["## Post-training of the SID generator: stages against their control", "",
           f"`scripts/recipes/reproduce_post_training.sh`: a reduced synthetic log ({reader['num_users']:,} users, "
           f"{reader['num_items']:,} items, {reader['num_clusters']} clusters; {summary['interactions']:,} "
           "interactions), leave-one-out, full-corpus ranking, history removed; test split, best validation "
           "checkpoint. SIDs: residual k-means on the SASRec teacher's item table (collaborative). Every stage starts "
           "from its seed's SFT best checkpoint and trains the same number of epochs with the same optimizer; the "
           "control continues next-token training. One CPU thread per run on a shared 2-core machine (load average "
           "20-30 for the first runs, up to 13 of them side by side with other engineers' jobs; 5-8 for the "
           "re-run of the teacher, SFT, control and the `sdpo_sft*` arms), so train times are wall times under "
           "contention. Epoch caps were set by the time left, not by convergence: a best epoch equal to the "
           "last (counted from 0) means the run was still improving.", ""]
    out = heading + [
           "| model | " + " | ".join(columns) + " | invalid | test log p(target) | trainable params | seeds | "
           "epochs (best), train time | source |", "|---|" + "---|" * (len(columns) + 7)]
    for stage in _stages_of(by_stage, POST_STAGES):
        stage_runs, label = by_stage[stage], _stage_label(stage)
        tests = [r["metrics"]["test"] for r in stage_runs]
        cells = [_cell([t[c] for t in tests]) for c in columns]
        extra = [_cell([t["invalid_rate"] for t in tests if "invalid_rate" in t]),
                 _cell([t["target_log_prob"] for t in tests if "target_log_prob" in t]),
                 ", ".join(f"{n:,}" for n in sorted({r["parameters"]["trainable"] for r in stage_runs
                                                      if "parameters" in r})) or "–"]
        seeds = ", ".join(str(r["seed"]) for r in stage_runs)
        names = ", ".join(f"`results/{r['name']}.json`" for r in stage_runs)
        out.append(f"| **{label}** | " + " | ".join(cells + extra) + f" | {seeds} | {_budget(stage_runs)} | "
                   f"{names} |")
    for name, metrics in first["baselines"].items():
        out.append(f"| {name} (baseline) | " + " | ".join(_cell([metrics["test"][c]]) for c in columns) +
                   f" | – | – | – | – | – | `results/{first['name']}.json` |")
    by_model = {_stage_label(s): rs for s, rs in by_stage.items()}
    out += ["", f"Commits: {_commits(runs)}.", ""]
    out += below_baselines(by_model)
    best_name, best = max(first["baselines"].items(), key=lambda kv: kv[1]["test"]["recall@10"])
    recall, users = best["test"]["recall@10"], summary["users"]
    out += [f"The test set has {users:,} users: the binomial standard error of a recall@10 near {recall:.3f} "
            f"(`{best_name}`) is {math.sqrt(recall * (1 - recall) / users):.4f}.", ""]
    intros = {"sft_more": "Each stage against continued SFT from the same checkpoint (same seed, same extra epochs, "
                          "dropout on as in SFT):",
              "sft_more_nodrop": "The same against continued SFT without dropout, the matched control of the "
                                 "alignment stages that train without it (`align.disable_dropout`, the default):"}
    for control_stage in _stages_of(by_stage, ("sft_more", "sft_more_nodrop")):
        lines = _against_control(by_stage, control_stage)
        if lines:
            intro = intros.get(control_stage, f"Against `{_stage_label(control_stage)}` (the stages from the same "
                                              "SFT run, with the same seed, learning rate and epoch cap):")
            out += [intro, ""] + lines + [""]
    _add_comparisons(out, by_stage, SFT_COMPARISONS[:1])
    lines = (_against_control(by_stage, "sft", stages=("sft_items",))
             + _against_control(by_stage, "sft_distill", stages=("sft_items_distill",)))
    lines += [] if "sft_distill" in by_stage else _against_control(by_stage, "sft", stages=("sft_items_distill",))
    if lines:
        out += ["An item head re-ranking the beam (`model.generator.item_head=true model.decoding.rank=hybrid`) "
                "against the same training without one, or against plain SFT where no run with distillation from "
                "the first step was made (same seed, learning rate and epoch cap):", ""] + lines + [""]
    _add_comparisons(out, by_stage, SFT_COMPARISONS[1:])
    out.append(prose("post_training", dataset))
    aligned = [(s, by_stage[s]) for s in _stages_of(by_stage, ALIGN_STAGES)
               if all(r["align"].get("tested_weights_on_training_examples") for r in by_stage[s])]
    if aligned:
        keys = ["loss", "chosen_reward", "rejected_reward", "reward_margin", "reward_accuracy", "chosen_log_ratio",
                "rejected_log_ratio"]
        out += ["Preference statistics of the tested weights over the stage's own preference examples (examples "
                "`last`: each training user's, chosen = its last training item; `all`: every position of every "
                "training sequence), against the cached SFT reference; rewards are β·(log π − log π_ref), "
                "log-ratios log π − log π_ref in nats (a negative chosen log-ratio: the chosen item became less "
                "likely, DPO's known failure). Mean over seeds.", "",
                "| stage | β | negatives | examples | " + " | ".join(keys) + " |",
                "|---|---|---|---|" + "---|" * len(keys)]
        for stage, stage_runs in aligned:
            a = stage_runs[0]["align"]
            stats = [r["align"]["tested_weights_on_training_examples"] for r in stage_runs]
            settings = {**stage_runs[0]["config"]["align"], **a}  # beam_skip: in the config of older runs' files
            out.append(f"| {_stage_label(stage)} | {a['beta']:g} | {_negatives_label(settings)} | "
                       f"{a.get('positions', 'last')} | " +
                       " | ".join(f"{statistics.mean(s[k] for s in stats):+.4f}" for k in keys) + " |")
        out.append("")
    return out
