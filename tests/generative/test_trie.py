"""The prefix trie admits exactly the valid continuations: checked against Python sets and the brute-force
comparison with every semantic ID, on hypothesis-drawn codebooks and tuple sets."""
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
