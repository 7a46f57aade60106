"""The results docs (scripts/docs/make_results_doc.py): the templates it fills, and the renderers' pieces that decide
which results share a row (scripts/docs/tables/, and the *_tables modules beside the scripts that write results)."""
import importlib

import pytest

from scripts.analysis import cold_start_tables, compare_rankings_tables
from scripts.docs import make_results_doc
from scripts.docs.tables import generative, post_training, training
from scripts.docs.tables.common import prose
from scripts.gpu import record_gpu_tests_tables
from tests.conftest import load_script


def _sections(files: list[dict]) -> list[str]:
    """A renderer for the template tests: a heading per file, then the prose kept for that file."""
    return [line for f in files for line in (f"## {f['name']}", prose("notes", f["name"]))]


def test_a_template_is_filled_by_its_renderers_and_its_prose(tmp_path):
    template = tmp_path / "page.md"
    template.write_text("# Results: A page\n\n{{ prose:intro }}\n{{ tests.test_results_doc._sections }}\n\n"
                        "<!-- prose:intro -->\nFixed text.\n\n<!-- /prose -->\n\n"
                        "<!-- prose:notes:x -->\nWhat x rests on.\n<!-- /prose -->\n")
    page, blocks = make_results_doc.read_template(template)
    assert page == ["# Results: A page", "", "{{ prose:intro }}", "{{ tests.test_results_doc._sections }}"]
    assert blocks == {"intro": ["Fixed text.", ""], "notes:x": ["What x rests on."]}
    # y has no notes: its prose line goes
    assert make_results_doc.fill(page, [{"name": "x"}, {"name": "y"}], blocks) == [
        "# Results: A page", "", "Fixed text.", "", "## x", "What x rests on.", "## y"]


@pytest.mark.parametrize("text, error", [
    ("page\n<!-- prose:a -->\nA\n<!-- /prose -->\nmore page\n", "page.md:5: text outside a prose block"),
    ("page\n<!-- prose:a -->\nA\n", "prose block a has no <!-- /prose -->"),
    ("<!-- prose:a -->\n<!-- /prose -->\n<!-- prose:a -->\n<!-- /prose -->\n", "page.md:3: a second prose block a")])
def test_a_broken_template_is_a_clear_error(tmp_path, text, error):
    (tmp_path / "page.md").write_text(text)
    with pytest.raises(SystemExit, match=error):
        make_results_doc.read_template(tmp_path / "page.md")


def test_every_template_names_renderers_that_exist_and_pages_the_summary_links():
    templates = {p.stem: make_results_doc.read_template(p) for p in make_results_doc.TEMPLATES.glob("*.md")}
    for page, _ in templates.values():
        for line in page:
            match = make_results_doc.RENDERER.fullmatch(line)
            if match:
                module, _, function = match[1].rpartition(".")
                assert callable(getattr(importlib.import_module(module), function)), line
    pages = set(templates) - {"results", "archive"}  # the summary, and results/archive/README.md
    linked = {m[2] for line in templates["results"][0] for m in make_results_doc.INDEX.finditer(line)}
    assert linked == pages and all(templates[stem][0][0].startswith("# Results: ") for stem in pages)

def test_sid_tables_are_labelled_by_source_and_by_any_layout_but_the_default():
    default = {"encoder": {"name": "text"}, "tokenizer": {"name": "rqvae"}, "collisions": "extra_level"}
    balanced = {**default, "tokenizer": {"name": "rkmeans_balanced", "balanced": True}}
    four_levels = {**default, "encoder": {"name": "collaborative"}, "collisions": "nearest_free"}
    assert generative._sid_source_label(default) == "text"
    assert generative._sid_source_label(balanced) == "text (rkmeans_balanced, extra_level)"
    assert generative._sid_source_label(four_levels) == "collaborative (rqvae, nearest_free)"


def test_a_stage_is_compared_with_the_control_of_its_seed_and_learning_rate():

    def run(stage: str, seed: int, lr: float, ndcg: float, sft: str = "sft") -> dict:
        return {"name": f"beauty_post_{stage}_seed{seed}", "seed": seed, "config": {"optim": {"lr": lr}},
                "init_from": {"checkpoint": f"/x/runs/{sft}-{seed}/checkpoints/best.ckpt"},
                "align": {"disable_dropout": stage.startswith("sdpo")}, "metrics": {"test": {"ndcg@10": ndcg}}}

    by_stage = {"sft_more_nodrop": [run("sft_more_nodrop", 1, 5e-4, 0.030)],
                "sft_more_nodrop_lr5e-5": [run("sft_more_nodrop_lr5e-5", 1, 5e-5, 0.040)],
                "sdpo_seq_lr5e-5": [run("sdpo_seq_lr5e-5", 1, 5e-5, 0.044)],
                "sdpo_seq": [run("sdpo_seq", 1, 5e-4, 0.027), run("sdpo_seq", 2, 5e-4, 0.028)],
                "sft_more_nodrop_conv": [run("sft_more_nodrop_conv", 1, 5e-4, 0.050, sft="sft_conv")],
                "sdpo_seq_conv": [run("sdpo_seq_conv", 1, 5e-4, 0.050, sft="sft_conv")]}
    low = post_training._against_control(by_stage, "sft_more_nodrop_lr5e-5")
    assert len(low) == 1 and "(+10.0%)" in low[0] and "goal (+5%) met" in low[0]
    high = post_training._against_control(by_stage, "sft_more_nodrop")
    assert len(high) == 1 and "(-10.0%)" in high[0]  # seed 2 has no control; the others another rate or SFT run
    converged = post_training._against_control(by_stage, "sft_more_nodrop_conv")
    assert len(converged) == 1 and "(+0.0%)" in converged[0] and "early stopping" in converged[0]



def test_an_archived_arm_leaves_its_section_for_the_superseded_table_with_its_matched_control():
    def run(stage: str, seed: int, ndcg: float, archived: bool = False) -> dict:
        split = {"recall@5": ndcg, "ndcg@5": ndcg, "recall@10": ndcg, "ndcg@10": ndcg, "target_log_prob": -9.0}
        dataset = {"dataset": "beauty", "users": 10, "items": 5, "interactions": 50}
        return {"name": f"beauty_post_{stage}_seed{seed}", "seed": seed, "commit": "abc", "archived": archived,
                "config": {"optim": {"lr": 5e-4}, "data": {"reader": {}}}, "dataset": dataset,
                "init_from": {"checkpoint": f"/x/runs/sft-{seed}/checkpoints/best.ckpt"},
                "align": {"disable_dropout": stage != "sft_more"}, "metrics": {"test": split},
                "baselines": {"most_popular": {"test": split}}}

    files = [run(s, seed, ndcg) for s, ndcg in (("sft_more", 0.030), ("sft_more_nodrop", 0.040)) for seed in (0, 1)]
    files += [run("sdpo", 0, 0.020, True), run("sdpo", 1, 0.036, True)]
    lines = post_training.tables(files)
    table = lines[lines.index("## Superseded post-training arms (raw files in results/archive/)"):]
    assert not [line for line in lines[:len(lines) - len(table)] if "SFT + S-DPO" in line]
    (row,) = [line for line in table if line.startswith("| SFT + S-DPO (`sdpo`)")]
    # matched: sft_more_nodrop (no dropout, as the arm); the other control trains with dropout
    assert "| `sft_more_nodrop` | 0.0400 ± 0.0000 | -50.0%, -10.0%: **-30.0%** | -33.3%, +20.0%: **-6.7%** |" in row
    assert "`results/archive/beauty_post_sdpo_seed0.json`" in row
    assert post_training.archived_arms(files)[0].endswith(
        "Test NDCG@10 0.0280 against 0.0400 for its matched control `sft_more_nodrop` (-30.0%): lost to its control.")


def test_stage_names_split_into_a_stage_and_its_variant_tags():
    assert post_training._split_tags("sdpo_seq_conv_lr5e-5") == ("sdpo_seq", ["_conv", "_lr5e-5"])
    assert post_training._split_tags("sft_conv") == ("sft_conv", [])  # a stage of its own
    assert post_training._split_tags("sft_distill") == ("sft_distill", [])
    assert post_training._split_tags("sdpo_seq_distill") == ("sdpo_seq", ["_distill"])
    assert post_training._split_tags("unknown_lr5e-5") == ("unknown_lr5e-5", [])
    assert post_training._stage_label("sft_more_nodrop_lr5e-5") == (
        post_training.POST_STAGES["sft_more_nodrop"] + ", lr 5e-5")


def test_post_training_results_are_told_apart_by_the_dataset_prefix():
    assert post_training._post_prefix({"name": "post_sdpo_seed0"}) == "post_"
    assert post_training._post_prefix({"name": "beauty_post_sdpo_seed0"}) == "beauty_post_"
    assert post_training._post_prefix({"name": "scientific_post_sdpo_seq_seed2"}) == "scientific_post_"
    assert post_training._post_prefix({"name": "scientific_sasrec_seed0"}) is None
    assert post_training._stage({"name": "scientific_post_sdpo_seq_seed2"}) == "sdpo_seq"


def test_a_stage_is_compared_only_with_a_control_of_the_same_epoch_cap():

    def run(stage: str, epochs: int, ndcg: float) -> dict:
        return {"name": f"scientific_post_{stage}_seed0", "seed": 0,
                "config": {"optim": {"lr": 5e-4}, "trainer": {"max_epochs": epochs}},
                "init_from": {"checkpoint": "/x/runs/sft-0/checkpoints/best.ckpt"},
                "align": {"disable_dropout": False}, "metrics": {"test": {"ndcg@10": ndcg}}}

    by_stage = {"sft_more_nodrop": [run("sft_more_nodrop", 5, 0.050)],
                "sft_more_nodrop_ep12": [run("sft_more_nodrop_ep12", 12, 0.040)],
                "distill": [run("distill", 5, 0.055)], "distill_ep12": [run("distill_ep12", 12, 0.060)]}
    five = post_training._against_control(by_stage, "sft_more_nodrop")
    assert len(five) == 1 and "(+10.0%)" in five[0] and "12 epochs" not in five[0]
    twelve = post_training._against_control(by_stage, "sft_more_nodrop_ep12")
    assert len(twelve) == 1 and "(+50.0%)" in twelve[0] and "12 epochs" in twelve[0]


def test_distillation_from_the_first_step_is_compared_with_sft_of_the_same_seed():

    def run(stage: str, seed: int, ndcg: float) -> dict:
        return {"name": f"scientific_post_{stage}_seed{seed}", "seed": seed,
                "config": {"optim": {"lr": 1e-3}, "trainer": {"max_epochs": 25}},
                "metrics": {"test": {"ndcg@10": ndcg}}}

    by_stage = {"sft": [run("sft", 0, 0.050), run("sft", 1, 0.040)],
                "sft_distill": [run("sft_distill", 0, 0.055), run("sft_distill", 2, 0.070)],
                "distill": [run("distill", 0, 0.060)]}
    lines = post_training._against_control(by_stage, "sft", stages=("sft_distill",))
    assert len(lines) == 1 and "(+10.0%)" in lines[0] and "from the first step" in lines[0]  # seed 2 has no SFT run


def test_rankings_of_the_same_checkpoints_are_averaged_per_stage_and_ranking():

    def row(seed: int, decoding: dict, ndcg: float) -> dict:
        split = {"ndcg@10": ndcg, "recall@10": 2 * ndcg, "recall@20": 3 * ndcg, "target_log_prob": -9.0}
        return {"run": f"runs/sft_items-{seed}", "results_name": f"scientific_post_sft_items_seed{seed}",
                "seed": seed, "decoding": decoding, "metrics": {"valid": split, "test": split}, "seconds": 10.0}

    hybrid, wide = {"rank": "hybrid"}, {"rank": "hybrid", "beam": 50, "top_k": 50}
    files = [{"kind": "ranking_comparison", "name": f"rankings_seed{seed}", "commit": "abc",
              "dataset": {"dataset": "scientific"}, "runs": [row(seed, hybrid, ndcg), row(seed, wide, 0.07)]}
             for seed, ndcg in ((0, 0.06), (1, 0.08))]  # one file per seed: rows are averaged across files
    lines = compare_rankings_tables.tables(files)
    assert lines[0] == "## Same checkpoints, ranked several ways: scientific"
    table = [line for line in lines if line.startswith("| SID-GPT with an item head")]
    assert table == [
        "| SID-GPT with an item head re-ranking its beam, SFT | the beam, re-ranked by code + item-head "
        "log-probability | 0.0700 ± 0.0141 | 0.1400 ± 0.0283 | 0.0700 ± 0.0141 | 0.2100 ± 0.0424 | "
        "-9.0000 ± 0.0000 | 0, 1 | 10 |",
        "| SID-GPT with an item head re-ranking its beam, SFT | the beam, re-ranked by code + item-head "
        "log-probability (beam 50, top-k 50) | 0.0700 ± 0.0000 | 0.1400 ± 0.0000 | 0.0700 ± 0.0000 | "
        "0.2100 ± 0.0000 | -9.0000 ± 0.0000 | 0, 1 | 10 |"]
    assert compare_rankings_tables._ranking_label({"rank": "hybrid", "beam": 50, "top_k": 50, "code_weight": 0}) == (
        "the beam, ordered by the item head alone (beam 50, top-k 50)")
    assert compare_rankings_tables._ranking_label({"rank": "hybrid", "code_weight": 0.5}) == (
        "the beam, re-ranked by code + item-head log-probability (code weight 0.5)")
    assert compare_rankings_tables._ranking_label({"rank": "guided", "code_weight": 0}) == (
        "the beam steered and ordered by the item head alone (each prefix by the head's mass under it)")
    assert compare_rankings_tables._ranking_label({"rank": "guided", "beam": 50, "top_k": 50}) == (
        "the beam steered by the item head (each prefix by code log-probability + the head's mass under it) "
        "(beam 50, top-k 50)")


def test_the_skipped_negatives_reading_takes_its_figures_from_the_files():
    tags = "_items_tied_hdistill_guided05"

    def run(stage: str, seed: int, ndcg: float, accuracy: float = 0.5, rejected: float = -1.0) -> dict:
        stats = {"reward_accuracy": accuracy, "rejected_log_ratio": rejected}
        return {"name": f"beauty_post_{stage}{tags}_seed{seed}", "seed": seed,
                "config": {"align": {"beam_skip": 10, "num_negatives": 8}},
                "align": {"tested_weights_on_training_examples": stats}, "metrics": {"test": {"ndcg@10": ndcg}}}

    runs = [run("sft_more_nodrop", 0, 0.050), run("sft_more_nodrop", 1, 0.040),
            run("sdpo_seq_rank_beam", 0, 0.045, 0.8, -2.0), run("sdpo_seq_rank_beam", 1, 0.036, 0.6, -3.0),
            run("sdpo_seq_rank_beam_skip10", 0, 0.051, 0.7, -1.0), run("sdpo_seq_rank_beam_skip10", 1, 0.0396)]
    heldout = {"kind": "negatives_heldout", "runs": [
        {"run": f"/r/sdpo_seq_rank_beam_skip10{tags}-{s}", "dataset": {"dataset": "beauty"},
         "examples_rejecting_either": share} for s, share in ((0, 0.05), (1, 0.06))]}
    text, _ = post_training.skipped_negatives_reading(runs, [heldout], "beauty")
    # +2.0% and -1.0% against the control of the same seed; accuracy (0.7 + 0.5) / 2, top 8 (0.8 + 0.6) / 2
    assert "ranks 11-18" in text and "(per seed +2.0%, -1.0%; mean +0.5%, below the +5% goal)" in text
    assert "reward accuracy is 0.60 (top 8: 0.70)" in text and "log-ratio -1.00 nats (-2.50)" in text
    assert "5.0%-6.0% of its examples" in text and "(not measured with the top 8" in text
    assert "recovers what the top ones cost" in text
    assert post_training.skipped_negatives_reading(runs[:4], [heldout], "beauty") == []  # no skip arm: no paragraph


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.kernels.test_kernels" name="test_a" time="1.234"/>
<testcase classname="tests.kernels.test_kernels" name="test_b[cuda]" time="2.0">
  <failure message="assert 1 == 2">long traceback</failure></testcase>
<testcase classname="tests.generative.test_gpu_recipe" name="test_c" time="0.5">
  <skipped type="pytest.skip" message="no nvcc on this machine"/></testcase>
<testcase classname="tests.generative.test_gpu_recipe" name="test_d" time="0.1">
  <error message="fixture failed | badly"/></testcase>
</testsuite></testsuites>"""


def test_gpu_test_outcomes_are_read_from_pytests_junit_file_and_shown_per_test(tmp_path):
    record = load_script("scripts/gpu/record_gpu_tests.py")
    (tmp_path / "tests.xml").write_text(JUNIT)
    tests = record.read_junit(tmp_path / "tests.xml")
    assert [(t["test"], t["outcome"], t["seconds"], t["message"]) for t in tests] == [
        ("tests/kernels/test_kernels.py::test_a", "passed", 1.23, ""),
        ("tests/kernels/test_kernels.py::test_b[cuda]", "failed", 2.0, "assert 1 == 2"),
        ("tests/generative/test_gpu_recipe.py::test_c", "skipped", 0.5, "no nvcc on this machine"),
        ("tests/generative/test_gpu_recipe.py::test_d", "error", 0.1, "fixture failed | badly")]
    results = {"name": "gpu_tests", "kind": "gpu_tests", "commit": "0123456789abcdef (named by GENREC_COMMIT)",
               "environment": {"cuda": "NVIDIA H200"}, "summary": {"passed": 1, "failed": 1, "error": 1, "skipped": 1},
               "versions": {"torch": "2.11.0+cu130", "cuda": "13.0", "triton": "3.6.0"}, "tests": tests}
    lines = record_gpu_tests_tables.tables([results])
    assert "one NVIDIA H200: torch 2.11.0+cu130 (CUDA 13.0), triton 3.6.0, commit `0123456789ab`." in lines[2]
    assert "1 passed, 1 failed, 1 error, 1 skipped." in lines[2]
    assert lines[6:] == ["| `test_a` | passed | 1.2 |", "| `test_b[cuda]` | failed: assert 1 == 2 | 2.0 |",
                         "| `test_c` | skipped: no nvcc on this machine | 0.5 |",
                         "| `test_d` | error: fixture failed / badly | 0.1 |", ""]


def test_a_junit_file_without_test_cases_is_a_clear_error(tmp_path):
    record = load_script("scripts/gpu/record_gpu_tests.py")
    (tmp_path / "empty.xml").write_text("<testsuites><testsuite name='pytest' tests='0'/></testsuites>")
    (tmp_path / "broken.xml").write_text("<testsuites>")
    for name, expected in (("empty.xml", "no <testcase> elements"), ("broken.xml", "not a readable JUnit XML")):
        with pytest.raises(SystemExit, match=f"{name}: {expected}"):
            record.read_junit(tmp_path / name)


def _split_metrics(ndcg: float) -> dict:
    return {"ndcg@10": ndcg, "recall@10": 2 * ndcg, "recall@20": 3 * ndcg, "target_log_prob": -9.0}


def test_the_generative_retrieval_table_says_what_carries_each_ranking_and_reads_its_own_figures():
    """One row per named ranking with its carrier, the dense rows and the baselines; the reading's percentages come
    from the same figures (head 0.06 against the distilled SASRec's 0.05: +20.0%)."""

    def row(seed, mode, carried, ndcg):
        return {"run": f"runs/gen-{seed}", "results_name": f"beauty_gr_generator_seed{seed}", "seed": seed,
                "mode": mode, "carried_by": carried, "decoding": {},
                "metrics": {"valid": _split_metrics(ndcg), "test": _split_metrics(ndcg)}}

    def trained(name, seed, ndcg, **extra):
        return {"name": name, "seed": seed, "commit": "abc", "metrics": {"valid": _split_metrics(ndcg),
                                                                        "test": _split_metrics(ndcg)}, **extra}

    comp = {"kind": "ranking_comparison", "name": "beauty_gr_rankings", "commit": "abc", "modes": ["codes", "head"],
            "dataset": {"dataset": "beauty"}, "protocol": {"users_scored": {"test": 22363},
                                                           "split": "leave-one-out (valid: ..., test: last)"},
            "runs": [row(s, m, c, n) for s in (0, 1) for m, c, n in (("codes", "codes", 0.03), ("head", "head", 0.06))],
            "baselines": {"transitions_last3_skip": {"valid": _split_metrics(0.05), "test": _split_metrics(0.05)}}}
    files = [comp] + [trained(f"beauty_gr_generator_seed{s}", s, 0.06, parameters={"total": 2469120},
                              sid_table={"codebook_sizes": [256, 256, 256, 16]}) for s in (0, 1)]
    files += [trained(f"beauty_gr_sasrec_distill_seed{s}", s, 0.05, parameters={"total": 2348800}) for s in (0, 1)]
    files += [trained("beauty_sasrec_seed0", 0, 0.054), trained("beauty_gr_teacher_seed0", 0, 0.055)]
    lines = compare_rankings_tables.generative_retrieval_tables(files)
    assert lines[0] == "## Generative retrieval, what carries the ranking: beauty"
    rows = [line for line in lines if line.startswith("|") and "---" not in line][1:]
    assert [r.split(" | ")[2] for r in rows] == ["**codes**", "**head**", "item table", "item table", "item table",
                                                  "counts"]
    assert rows[1].split(" | ")[5] == "0.0600 ± 0.0000" and "2,469,120" in rows[1] and "2,348,800" in rows[4]
    reading = next(line for line in lines if line.startswith("Reading"))
    assert "codes alone 0.0300 (-40.0% against the best baseline" in reading
    assert "the generator's head is +20.0% against it, and its codes alone -40.0%" in reading


def test_the_cold_start_goals_are_checked_on_the_tables_own_figures():

    def part(all_ndcg, cold_recall):
        return {"all": {"recall@10": 0.1, "ndcg@10": all_ndcg}, "warm": {"ndcg@10": all_ndcg},
                "cold": {"recall@10": cold_recall, "ndcg@10": cold_recall / 2, "recall@20": cold_recall}}

    test = {"codes": part(0.03, 0.06), "codes_unseen": part(0.03, 0.2), "head": part(0.06, 0.0),
            "hybrid_eps0.1": part(0.059, 0.1), "hybrid_eps0.2": part(0.057, 0.15)}
    baselines = {"semantic_knn": part(0.02, 0.05), "semantic_knn_unseen": part(0.001, 0.1),
                 "transitions_last3_skip": part(0.05, 0.0), "teacher": part(0.058, 0.0)}
    details = {"cold_items": 0.05, "cold_seed": 0, "cold_item_count": 605, "warm_item_count": 11496,
               "cold_training_events_removed": 6000, "cold_targets": {"valid": 900, "test": 1000},
               "users_evaluated": {"valid": 22000, "test": 22363}}
    f = {"kind": "cold_start", "name": "beauty_cold_start", "commit": "abc", "dataset": {"dataset": "beauty",
                                                                                         "items": 12101},
         "protocol": {"split_details": details},
         "runs": [{"seed": s, "sid_table": {"encoder": "text", "content_hash": "x"}, "metrics": {"test": test}}
                  for s in (0, 1)], "baselines": {"test": baselines}}
    lines = cold_start_tables.tables([f])
    assert "605 of 12,101 items held out" in lines[2] and "1,000 of 22,363 test targets" in lines[2]
    goals = [line for line in lines if line.startswith("- ")]
    assert goals[0].endswith("0.0600 against 0.0500, 1.20x: goal (1.5x) **not met**.")
    assert goals[1].endswith("0.2000 against 0.1000, 2.00x: goal (1.5x) **met**.")
    assert "(`head`, 0.0600): -1.7%" in goals[2] and goals[2].endswith("**met**.")
    assert "-5.0%" in goals[3] and goals[3].endswith("**not met**.")
    assert lines[0] == "## Item cold start: beauty" and prose("cold_start", "beauty") in lines
    # a file written with --unseen-beam says so in its heading, its text, its row and its prose key
    wide = cold_start_tables.tables([f | {"unseen_beam": 605}])
    assert wide[0] == "## Item cold start: beauty, a beam of 605 among the cold items"
    assert wide[2].endswith("605 wide (`UNSEEN_BEAM=605`: `--unseen-beam 605`; the model's own beam elsewhere), as "
                            "many as the cold items: every one is scored by its codes' log-probability.")
    assert any(line.startswith("| a beam of 605 among the cold items' IDs only | codes |") for line in wide)
    assert prose("cold_start", "beauty", "beam605") in wide


def test_the_main_table_shows_a_generative_models_best_run_with_its_budget():
    """A GPU run of the same model ranking the same way replaces the CPU run when its validation is better; a GPU
    run of the same model ranking another way (the item head) does not."""

    def run(name, model, valid, rank, cuda=None):
        return {"name": name, "model": model, "dataset": {"dataset": "beauty"}, "sid_table": {},
                "decoding": {"rank": rank}, "metrics": {"valid": {"ndcg@10": valid}, "test": {}},
                "environment": {"cuda": cuda}, "protocol": {}}

    cpu = [run("beauty_tiger_seed0", "tiger", 0.007, "codes"), run("beauty_sid_gpt_seed0", "sid_gpt", 0.03, "codes")]
    gpu = [run("beauty_tiger_gpu_seed0", "tiger", 0.037, "codes", "H200"),
           run("beauty_sid_gpt_gpu_seed0", "sid_gpt", 0.07, "guided", "H200")]
    best = training._best_generative_runs(cpu, cpu + gpu)
    assert sorted(r["name"] for r in best) == ["beauty_sid_gpt_seed0", "beauty_tiger_gpu_seed0"]


def test_the_codes_tries_table_compares_a_try_without_control_to_the_ranking_tables_codes():
    """Where a dataset has no control run (Beauty), the ranking table's generators ranked by their codes (checkpoint
    chosen by the head) are the reference row; the goal's gap is the mean over the try's seeds (0.042 against the
    goal 0.0424: -0.9%; against the codes rows' 0.031: +35.5%)."""
    sid = {"codebook_sizes": [1024, 256, 256, 8]}
    tries = [{"name": f"beauty_codes_first1024_seed{s}", "seed": s, "commit": "abc", "dataset": {"dataset": "beauty"},
              "sid_table": sid, "metrics": {"valid": _split_metrics(0.05), "test": _split_metrics(n)},
              "baselines": {"transitions_last3_skip": {"valid": _split_metrics(0.06), "test": _split_metrics(0.05)}}}
             for s, n in ((0, 0.040), (1, 0.044))]
    comp = {"kind": "ranking_comparison", "name": "beauty_gr_rankings", "dataset": {"dataset": "beauty"},
            "runs": [{"mode": mode, "seed": s, "results_name": f"beauty_gr_generator_seed{s}",
                      "metrics": {"valid": _split_metrics(n + 0.01), "test": _split_metrics(n)}}
                     for s, n in ((0, 0.030), (1, 0.032)) for mode in ("codes", "head")]}
    generator = {"name": "beauty_gr_generator_seed0", "sid_table": {"codebook_sizes": [256, 256, 256, 16]}}
    lines = generative.codes_tries_tables(tries + [comp, generator])
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert rows[0].startswith("| first1024 |") and "| 0.0420 ± 0.0028 | 0, 1 |" in rows[0]
    assert rows[1].split(" | ")[2:7] == ["256 x 256 x 256 x 16", "0.0410 ± 0.0014", "0.0620 ± 0.0028",
                                         "0.0310 ± 0.0014", "0, 1"]
    reading = next(line for line in lines if line.startswith("Validation picks"))
    assert reading == ("Validation picks `first1024` (test NDCG@10 0.0420 over 2 seeds, +35.5% against the ranking "
                       "table's generators' codes). Goal 0.0424 (ActionPiece): **not met**, gap -0.9%; stretch 0.05: "
                       "gap -16.0%.")
