"""Dynamic sparse embeddings: rows keyed by raw int64 IDs, admitted and evicted while training runs, held in tiers
(process memory, an SSD store) with their optimizer state, mapped ahead by a prefetcher, sharded by ID hash,
checkpointed and exported for serving. :class:`DynamicItemEmbedding` is the model-facing module (the interface of
:class:`genrec.embedding.ItemEmbedding`); :class:`DynamicTable` is one table in one process."""
from genrec.embedding.dynamic.config import DynamicTableConfig
from genrec.embedding.dynamic.module import DynamicItemEmbedding
from genrec.embedding.dynamic.table import DynamicTable

__all__ = ["DynamicItemEmbedding", "DynamicTable", "DynamicTableConfig"]
