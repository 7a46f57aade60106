"""Where a result says it came from: the checkout's commit, an installed package, or a copy that names its commit."""
import subprocess

from genrec.utils.provenance import REPO_ROOT, git_commit


def test_a_checkout_records_its_head(monkeypatch):
    monkeypatch.delenv("GENREC_COMMIT", raising=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    assert git_commit().removesuffix("+dirty") == head


def test_a_copy_records_the_commit_it_names(tmp_path, monkeypatch):
    """A copy's .git can be missing or stale (a lent GPU machine got an older one): the named commit wins."""
    monkeypatch.setenv("GENREC_COMMIT", "abc123")
    assert git_commit(tmp_path) == git_commit(REPO_ROOT) == "abc123 (named by GENREC_COMMIT)"
    monkeypatch.delenv("GENREC_COMMIT")
    assert git_commit(tmp_path).endswith("(installed, not a git checkout)")
