"""The task of generative models over semantic IDs: next-token loss, beam-search evaluation with the same ranking
metrics as the retrieval models, and the share of decoded tuples that are no item."""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from genrec.data.batch import JaggedBatch
from genrec.models.generative import BeamScorer, GenerativeRecommender
from genrec.training.fsdp import FSDPStrategy, shard_generator
from genrec.training.task import RecommenderTask, Reduce, Scorer


def global_mean(loss: torch.Tensor, count: int) -> torch.Tensor:
    """A process's mean ``loss`` over its ``count`` terms, times ``count * world / global count``: data-parallel
    gradient averaging then gives the gradient of the mean over every term of every process (batches of jagged
    sequences hold different numbers of targets per process). Identity in one process."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return loss
    local = torch.tensor(float(count), dtype=torch.float64, device=loss.device)
    total = local.clone()
    dist.all_reduce(total)
    return loss * (local * dist.get_world_size() / total).to(loss.dtype)


class GenerativeTask(RecommenderTask):
    """Trains a :class:`GenerativeRecommender` with its own loss; evaluates by beam search: the beam's ``top_k``
    items become a score matrix ranked by genrec's evaluator, so Recall/NDCG at cut-offs up to ``top_k`` are exact
    for the beam's list and MRR counts only targets inside it. Also reported: ``invalid_rate``, the share of
    returned tuples that map to no item (0 with constrained decoding), and ``target_log_prob``, the mean
    teacher-forced score of the users' true next items under what ranks (:class:`BeamScorer`: the code
    ``log p(target | history)`` where the codes rank, the item head's where it ranks alone; does a stage make the
    true item more or less likely, beam or not).

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
        """Mean next-token loss (plus the item head's, :meth:`TargetLogProbs.loss`); with several processes
        rescaled so that the averaged gradient is that of the mean over every code token of the global batch (see
        :func:`global_mean`)."""
        targets = self.model.target_log_probs(batch)
        return global_mean(targets.loss(self.model.sids.codes[targets.items]), len(targets.items))

    def configure_model(self) -> None:
        """Under fully sharded training (Lightning's ModelParallelStrategy) shard the generator (FSDP2)."""
        strategy = self.trainer.strategy
        if isinstance(strategy, FSDPStrategy):
            shard_generator(self.model, self.device_mesh["data_parallel"], strategy.fsdp.reshard_after_forward)

    def make_scorer(self) -> Scorer:
        self._beam_scorer = self.model.scorer()  # counts the tuples that are no item
        return self._beam_scorer

    def eval_extras(self, reduce: Reduce) -> dict[str, float]:
        decoded, invalid, users, log_prob = reduce(torch.tensor(self._beam_scorer.pop_counts(),
                                                                dtype=torch.float64)).tolist()
        return {"invalid_rate": invalid / max(decoded, 1.0), "target_log_prob": log_prob / max(users, 1.0)}

    def notes(self, metrics: dict[str, float]) -> list[str]:
        return [f"Invalid semantic IDs among the decoded top-{self.model.top_k}: {metrics['invalid_rate']:.2%} "
                f"(constrained: {self.model.constrained})"]

    def run_info(self) -> dict[str, Any]:
        """The model's parameter counts (all, trainable: LoRA trains a few), the SID table the numbers depend on and
        how the model decodes."""
        m = self.model
        parameters = {"total": sum(p.numel() for p in m.parameters()),
                      "trainable": sum(p.numel() for p in m.parameters() if p.requires_grad)}
        return {"parameters": parameters,
                "sid_table": {"folder": self.sid_table_folder, "content_hash": m.sids.content_hash,
                              "codebook_sizes": list(m.sids.codebook_sizes), "tokenizer": m.sid_config},
                "decoding": {"beam": m.beam, "top_k": m.top_k, "constrained": m.constrained,
                             "history_removal": "history items masked in the beam's last step" if
                             self.exclude_history else "none",
                             "rank": m.ranking.name, "code_weight": m.ranking.code_weight,
                             "carried_by": m.ranking.carried_by, "ranking": m.ranking.describe(m.top_k)}}
