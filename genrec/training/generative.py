"""The task of generative models over semantic IDs: next-token loss, beam-search evaluation with the same ranking
metrics as the retrieval models, and the share of decoded tuples that are no item."""
from __future__ import annotations

from typing import Any

import torch

from genrec.data.batch import JaggedBatch
from genrec.models.generative import BeamScorer, GenerativeRecommender
from genrec.training.task import RecommenderTask, Reduce, Scorer


class GenerativeTask(RecommenderTask):
    """Trains a :class:`GenerativeRecommender` with its own loss; evaluates by beam search: the beam's ``top_k``
    items become a score matrix ranked by genrec's evaluator, so Recall/NDCG at cut-offs up to ``top_k`` are exact
    for the beam's list and MRR counts only targets inside it. Also reported: ``invalid_rate``, the share of
    returned tuples that map to no item (0 with constrained decoding).

    Args:
        model: the generative recommender.
        sid_table_folder: where its SID table was read from (recorded in the run's metrics).
        kwargs: :class:`RecommenderTask` settings (optimizer, warm-up, cut-offs, history removal).
    """

    def __init__(self, model: GenerativeRecommender, sid_table_folder: str = "", **kwargs):
        super().__init__(model, **kwargs)
        self.sid_table_folder = sid_table_folder
        self.model.exclude_history = self.exclude_history
        self._beam_scorer: BeamScorer | None = None

    @RecommenderTask.exclude_history.setter
    def exclude_history(self, value: bool) -> None:
        self.evaluator.exclude_history = value
        self.model.exclude_history = value  # removed inside the beam's last step

    def training_loss(self, batch: JaggedBatch) -> torch.Tensor:
        return self.model.loss(batch)

    def make_scorer(self) -> Scorer:
        self._beam_scorer = self.model.scorer()  # counts the tuples that are no item
        return self._beam_scorer

    def eval_extras(self, reduce: Reduce) -> dict[str, float]:
        decoded, invalid = reduce(torch.tensor(self._beam_scorer.pop_counts(), dtype=torch.float64)).tolist()
        return {"invalid_rate": invalid / max(decoded, 1.0)}

    def notes(self, metrics: dict[str, float]) -> list[str]:
        return [f"Invalid semantic IDs among the decoded top-{self.model.top_k}: {metrics['invalid_rate']:.2%} "
                f"(constrained: {self.model.constrained})"]

    def run_info(self) -> dict[str, Any]:
        """The SID table the numbers depend on and how the model decodes."""
        m = self.model
        return {"sid_table": {"folder": self.sid_table_folder, "content_hash": m.sids.content_hash,
                              "codebook_sizes": list(m.sids.codebook_sizes), "tokenizer": m.sid_config},
                "decoding": {"beam": m.beam, "top_k": m.top_k, "constrained": m.constrained,
                             "history_removal": "history items masked in the beam's last step" if
                             self.exclude_history else "none",
                             "ranking": f"the beam's top-{m.top_k} items ranked by log-probability; items outside "
                                        "it count as misses (MRR truncated there)"}}
