"""The manifest written by genrec-export follows its schema; a broken manifest is refused with the key named."""
import copy
import json

import pytest

from genrec.export.manifest import ManifestError, validate_manifest
from genrec.runs import file_digest


def test_written_manifest_lists_every_file_with_its_checksum(exported):
    out, manifest = exported
    saved = json.loads((out / "manifest.json").read_text())
    assert saved == json.loads(json.dumps(manifest))
    validate_manifest(saved)
    files = {entry["file"] for entry in saved["artifacts"].values()}
    assert files == {p.name for p in out.iterdir()} - {"manifest.json"}
    for entry in saved["artifacts"].values():
        assert file_digest(out / entry["file"]) == entry["sha256"]
        assert (out / entry["file"]).stat().st_size == entry["bytes"]


def test_manifest_describes_the_model_and_its_artifacts(exported, tiny_run):
    out, manifest = exported
    run_metrics = tiny_run[1]
    model, artifacts = manifest["model"], manifest["artifacts"]
    assert model == {"name": "sasrec", "kind": "retrieval", "similarity": "dot", "normalised": False, "dim": 16,
                     "num_items": run_metrics["dataset"]["items"], "max_len": 20}
    assert artifacts["item_vectors"]["shape"] == [model["num_items"], 16]
    assert artifacts["item_ids"]["entries"] == model["num_items"] + 1
    ids = json.loads((out / "item_ids.json").read_text())
    assert ids[0] is None and len(set(ids[1:])) == model["num_items"]
    for name in manifest["retrieval"]["indexes"]:
        assert artifacts[name]["dim"] == 16 and artifacts[name]["ntotal"] == model["num_items"]
        assert 0.0 <= artifacts[name]["recall_at_10_vs_exact"] <= 1.0
    assert artifacts["index_flat"]["recall_at_10_vs_exact"] == 1.0
    parity = artifacts["user_tower"]["parity"]
    assert parity["passed"] and parity["users"] == run_metrics["dataset"]["users"]
    assert manifest["versions"]["torch"] and manifest["versions"]["faiss"] and manifest["source"]["checkpoint_sha256"]
    assert ("user_tower_onnx" in artifacts) != ("user_tower_onnx" in manifest["skipped"])


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.pop("versions"), "manifest lacks the key 'versions'"),
    (lambda m: m["model"].update(dim="16"), "model.dim should be int, got str '16'"),
    (lambda m: m["model"].update(kind="ranking"), "model.kind 'ranking' is not one of"),
    (lambda m: m["model"].update(kind="generative"), "manifest lacks the key 'decoding'"),
    (lambda m: m["model"].pop("similarity"), "model lacks the key 'similarity'"),
    (lambda m: m.update(format_version=2), "version 2 is not 'genrec-export' version 1"),
    (lambda m: m["artifacts"]["index_flat"].pop("sha256"), "artifacts.index_flat lacks the key 'sha256'"),
    (lambda m: m["artifacts"]["index_flat"].update(kind="annoy"), "artifacts.index_flat.kind 'annoy' is not one of"),
    (lambda m: m["artifacts"]["user_tower"].pop("parity"), "artifacts.user_tower lacks the key 'parity'"),
    (lambda m: m["retrieval"].update(default_index="index_x"), "names the artifact 'index_x'"),
])
def test_broken_manifests_are_refused_with_the_key_named(exported, edit, message):
    manifest = copy.deepcopy(exported[1])
    edit(manifest)
    with pytest.raises(ManifestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_manifest(manifest, "x/manifest.json")
