"""Fixtures of the generative tests (kept free of optional packages such as faiss, so that the GPU checks of
scripts/gpu/gpu_recipe_check.sh collect on a machine that has none)."""
import pytest

from tests.generative.helpers import tiny_sid_table


@pytest.fixture(scope="module")
def sid_table(tmp_path_factory):
    """A random SID table for the tiny synthetic dataset's items (``helpers.TINY``)."""
    return tiny_sid_table(tmp_path_factory.mktemp("sid"))
