"""Shared by the data tests: a small synthetic dataset, preprocessed."""
import pytest

from genrec.data.preprocess import PreprocessConfig, build_sequences
from genrec.data.synthetic import generate_synthetic


@pytest.fixture(scope="module")
def data():
    """300 synthetic users over 200 items (12 interactions each on average), deduplicated, every item kept."""
    log = generate_synthetic(num_users=300, num_items=200, num_clusters=8, mean_length=12, seed=3)
    return build_sequences(log, PreprocessConfig(min_user_interactions=5, min_item_interactions=1, dedupe=True))
