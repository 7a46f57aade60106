"""The prefix trie admits exactly the valid continuations: checked against Python sets and the brute-force
comparison with every semantic ID, on hypothesis-drawn codebooks and tuple sets; its prefix masses against sums
over the items under each prefix."""
import itertools

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from genrec.models.trie import PrefixTrie, brute_force_allowed


@st.composite
def tables(draw):
    sizes = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    every = list(itertools.product(*[range(k) for k in sizes]))
    chosen = draw(st.lists(st.sampled_from(every), min_size=1, max_size=min(len(every), 40), unique=True))
    return sizes, chosen


@settings(max_examples=60, deadline=None)
@given(tables(), st.data())
def test_trie_admits_exactly_the_valid_continuations(table, data):
    sizes, tuples = table
    codes = torch.tensor(tuples, dtype=torch.long)
    trie = PrefixTrie(codes, sizes)
    for level in range(len(sizes)):
        # every prefix of this length the codebooks allow: valid ones and ones no item has
        every = list(itertools.product(*[range(k) for k in sizes[:level]]))
        prefixes = torch.tensor(every, dtype=torch.long).view(len(every), level)
        expected = torch.zeros(len(prefixes), sizes[level], dtype=torch.bool)
        for r, prefix in enumerate(prefixes.tolist()):
            for t in tuples:
                if list(t[:level]) == prefix:
                    expected[r, t[level]] = True
        assert torch.equal(brute_force_allowed(codes, prefixes, sizes[level], chunk=3), expected)
        # walk the trie to every valid prefix's node and compare its mask
        valid = [r for r in range(len(prefixes)) if any(list(t[:level]) == prefixes[r].tolist() for t in tuples)]
        nodes = torch.zeros(len(valid), dtype=torch.long)
        for j in range(level):
            nodes = trie.advance(j, nodes, prefixes[valid, j])
        assert (nodes >= 0).all()
        assert torch.equal(trie.allowed(level, nodes), expected[valid])
    # a full walk ends on the item ID (row i of codes is item i + 1); an invalid step gives -1
    pick = data.draw(st.lists(st.integers(0, len(tuples) - 1), min_size=1, max_size=10))
    nodes = torch.zeros(len(pick), dtype=torch.long)
    for level in range(len(sizes)):
        nodes = trie.advance(level, nodes, codes[pick, level])
    assert nodes.tolist() == [p + 1 for p in pick]


def test_invalid_step_gives_minus_one():
    trie = PrefixTrie(torch.tensor([[0, 1], [1, 0]]), (2, 2))
    assert trie.advance(0, torch.tensor([0, 0]), torch.tensor([0, 1])).tolist() == [0, 1]
    assert trie.advance(1, torch.tensor([0, 0, 1]), torch.tensor([0, 1, 0])).tolist() == [-1, 1, 2]
    assert trie.allowed(1, torch.tensor([0, 1])).tolist() == [[False, True], [True, False]]


@settings(max_examples=40, deadline=None)
@given(tables(), st.integers(0, 2**16))
def test_prefix_log_mass_sums_the_items_under_each_node(table, seed):
    """Node ``j`` of level ``l + 1`` is the ``j``-th distinct length-``(l + 1)`` prefix in sorted order; its mass is
    the sum of the probabilities of the items that start with it (an item left out with ``-inf`` adds nothing)."""
    sizes, tuples = table
    trie = PrefixTrie(torch.tensor(tuples, dtype=torch.long), sizes)
    g = torch.Generator().manual_seed(seed)
    log_probs = torch.log_softmax(torch.randn(2, len(tuples) + 1, generator=g) * 3, dim=1)
    log_probs[:, 0] = float("-inf")
    log_probs[1, 1] = float("-inf")  # item 1 left out for the second row
    mass = trie.prefix_log_mass(log_probs)
    assert len(mass) == len(sizes) and mass[-1] is log_probs
    for level in range(len(sizes) - 1):
        prefixes = sorted({t[:level + 1] for t in tuples})
        expected = torch.full((2, len(prefixes)), float("-inf"))
        for j, prefix in enumerate(prefixes):
            under = [i + 1 for i, t in enumerate(tuples) if t[:level + 1] == prefix]
            expected[:, j] = log_probs[:, under].logsumexp(1)
        assert torch.allclose(mass[level], expected, atol=1e-5)
