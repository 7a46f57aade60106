"""A tiny learnable task shared by the model tests: item ``i`` is always followed by ``i + 1`` (mod 10)."""
import torch

from genrec.data.batch import JaggedBatch
from genrec.embedding import ItemEmbedding
from genrec.models.encoder import SequenceEncoder
from genrec.models.losses import FullSoftmaxLoss
from genrec.models.recommender import SequentialRecommender


def train_on_successor_pattern(encoder: SequenceEncoder, steps: int = 150) -> tuple[float, float]:
    """Train ``encoder`` (width 16, max length >= 5) with a 10-item table and the full softmax on 10 sequences of 5
    inputs; returns the first and the last training loss."""
    model = SequentialRecommender(ItemEmbedding(10, 16), encoder).train()
    seqs = [[i % 10 + 1 for i in range(s, s + 6)] for s in range(10)]
    batch = JaggedBatch(item_ids=torch.tensor([i for s in seqs for i in s[:-1]]),
                        offsets=torch.arange(0, 51, 5), user_ids=torch.arange(10),
                        target_ids=torch.tensor([t for s in seqs for t in s[1:]]))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn, first = FullSoftmaxLoss(), None
    for _ in range(steps):
        loss = model.training_loss(batch, loss_fn)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return first, loss.item()
