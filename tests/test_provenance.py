"""Where a result says it came from: the checkout's commit, an installed package, or a copy that names its commit."""
import subprocess

from genrec.utils.provenance import REPO_ROOT, git_commit


def test_a_checkout_records_its_head(monkeypatch):
    monkeypatch.delenv("GENREC_COMMIT", raising=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    assert git_commit().removesuffix("+dirty") == head


def test_a_copy_without_git_records_the_commit_it_names(tmp_path, monkeypatch):
    monkeypatch.setenv("GENREC_COMMIT", "abc123")
    assert git_commit(tmp_path) == "abc123 (copy without .git)"
    assert git_commit(REPO_ROOT) != "abc123 (copy without .git)"  # a checkout's own .git wins
    monkeypatch.delenv("GENREC_COMMIT")
    assert git_commit(tmp_path).endswith("(installed, not a git checkout)")
