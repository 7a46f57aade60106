"""Export -> load (examples/retrieval_example.py, no genrec code) -> query reproduces genrec's own ranking; a
missing, corrupted or mismatched file is refused with the file and the mismatch named."""
import json
import shutil
import subprocess
import sys

import faiss
import numpy as np
import pytest

from genrec.export.index import build_index
from genrec.runs import file_digest
from tests.conftest import ROOT, load_script

example = load_script("examples/retrieval_example.py")


def test_flat_export_reproduces_the_framework_top10_for_every_test_user(exported):
    out, manifest = exported
    report = load_script("scripts/check_export.py").check(out)
    parity = report["indexes"]["index_flat"]["parity"]
    assert parity["users"] == manifest["source"]["dataset"]["users"]
    assert parity["identical_top10"] + parity["tie_order_differences"] == parity["users"]
    assert parity["other_differences"] == 0 and parity["max_abs_score_diff"] < 1e-4
    assert report["indexes"]["index_flat"]["recall_at_10_vs_exact"] == 1.0
    # served through the export, the flat index gives the framework's own test metrics
    assert report["indexes"]["index_flat"]["recall@10"] == pytest.approx(report["framework_test"]["recall@10"])
    assert set(report["baselines"]) == {"most_popular", "transitions", "transitions_last3_skip"}
    # the quantised tables' figures per precision, as the manifest has them; fp32 is the flat index's exact search
    assert set(report["quantization"]) == {"fp32", "fp16", "int8"}
    for dtype, figures in report["quantization"].items():
        measured = manifest["quantization"][dtype]
        assert figures["table_bytes"] == measured["table_bytes"]
        assert figures["recall_at_10_vs_fp32"] == measured["recall_at_10_vs_fp32"]
        assert figures["recall@10"] == measured["test_metrics"]["recall@10"]
    assert report["quantization"]["fp32"]["recall@10"] == pytest.approx(report["framework_test"]["recall@10"])


def test_recommend_maps_raw_ids_and_removes_the_history(exported):
    out, _ = exported
    retriever = example.ExportedRetriever(out, "index_flat")
    raw_ids = json.loads((out / "item_ids.json").read_text())
    history = raw_ids[1:6]
    top = retriever.recommend(history, k=10)
    assert len(top) == 10 and not {item for item, _ in top} & set(history)
    scores = [s for _, s in top]
    assert scores == sorted(scores, reverse=True)
    # the same as scoring every item with the exported vectors by hand
    vectors = np.load(out / "item_vectors.npy")
    query = retriever.encode([retriever.to_dense(history)])[0]
    by_hand = [raw_ids[i + 1] for i in np.argsort(-(vectors @ query), kind="stable") if raw_ids[i + 1] not in history]
    assert [item for item, _ in top] == by_hand[:10]
    with pytest.raises(ValueError, match="raw item IDs not in the exported catalogue .*item_ids.json"):
        retriever.recommend(history + ["no-such-item"])


@pytest.fixture
def copy_of(exported, tmp_path):
    shutil.copytree(exported[0], tmp_path / "export")
    return tmp_path / "export"


def _rewrite_manifest(folder, edit):
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_missing_manifest_and_missing_file(copy_of):
    (copy_of / "index_hnsw.faiss").unlink()
    with pytest.raises(example.ArtifactError, match=r"index_hnsw.faiss: not found \(listed in manifest.json"):
        example.ExportedRetriever(copy_of, "index_hnsw")
    (copy_of / "manifest.json").unlink()
    with pytest.raises(example.ArtifactError, match="manifest.json: not found"):
        example.ExportedRetriever(copy_of)


@pytest.mark.parametrize("file", ["index_flat.faiss", "user_tower.pt2", "item_ids.json"])
def test_corrupted_files_fail_their_checksum(copy_of, file):
    data = bytearray((copy_of / file).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy_of / file).write_bytes(bytes(data))
    with pytest.raises(example.ArtifactError, match=rf"{file}: SHA-256 .* does not match the manifest"):
        example.ExportedRetriever(copy_of, "index_flat")


def test_index_of_another_dimension_is_a_mismatch(copy_of):
    """An index from another export, with the manifest's checksum updated to match: caught by its shape."""
    vectors = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    index, _ = build_index(vectors, np.arange(1, 51), {"type": "flat"})
    faiss.write_index(index, str(copy_of / "index_flat.faiss"))
    new_sum = file_digest(copy_of / "index_flat.faiss")
    _rewrite_manifest(copy_of, lambda m: m["artifacts"]["index_flat"].update(sha256=new_sum))
    with pytest.raises(example.ArtifactError, match=r"index_flat.faiss: index holds 50 vectors of dim 8, manifest says "
                                                    r"\d+ items of dim 16"):
        example.ExportedRetriever(copy_of, "index_flat")


def test_id_map_of_another_catalogue_is_a_mismatch(copy_of):
    ids = json.loads((copy_of / "item_ids.json").read_text())
    (copy_of / "item_ids.json").write_text(json.dumps(ids[:-3]))
    _rewrite_manifest(copy_of, lambda m: m["artifacts"]["item_ids"].update(sha256=file_digest(copy_of / "item_ids.json")))
    with pytest.raises(example.ArtifactError, match=rf"item_ids.json: {len(ids) - 3} entries, manifest says "
                                                    rf"num_items \+ 1 = {len(ids)}"):
        example.ExportedRetriever(copy_of)


def test_manifest_of_another_format_is_refused(copy_of):
    _rewrite_manifest(copy_of, lambda m: m.update(format_version=2))
    with pytest.raises(example.ArtifactError, match="manifest.json: format 'genrec-export' version 2"):
        example.ExportedRetriever(copy_of)


def test_the_example_runs_standalone_and_reports_a_bad_file_in_one_line(copy_of):
    raw = json.loads((copy_of / "item_ids.json").read_text())[1:4]
    script = ROOT / "examples" / "retrieval_example.py"
    argv = [str(script), str(copy_of), "--k", "5", "--history", *map(str, raw)]
    # `import genrec` made to fail: the example must work from the exported files alone
    code = (f"import runpy, sys; sys.modules['genrec'] = None; sys.argv = {argv!r}; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')")
    run = lambda: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    ok = run()
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert len([line for line in ok.stdout.splitlines() if line.strip()[:1].isdigit()]) == 5
    (copy_of / "index_hnsw.faiss").write_bytes(b"not an index")
    bad = run()
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("retrieval_example: error: ")
    assert "index_hnsw.faiss: SHA-256" in bad.stderr
