"""scripts/make_results_doc.py: the pieces that decide which results share a row."""
from tests.conftest import load_script


def test_sid_tables_are_labelled_by_source_and_by_any_layout_but_the_default():
    doc = load_script("make_results_doc")
    default = {"encoder": {"name": "text"}, "tokenizer": {"name": "rqvae"}, "collisions": "extra_level"}
    balanced = {**default, "tokenizer": {"name": "rkmeans_balanced", "balanced": True}}
    four_levels = {**default, "encoder": {"name": "collaborative"}, "collisions": "nearest_free"}
    assert doc._sid_source_label(default) == "text"
    assert doc._sid_source_label(balanced) == "text (rkmeans_balanced, extra_level)"
    assert doc._sid_source_label(four_levels) == "collaborative (rqvae, nearest_free)"
