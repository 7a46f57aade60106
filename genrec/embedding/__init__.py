"""Embedding modules built on TorchRec collections (unsharded here; genrec.dist shards them)."""
from genrec.embedding.item_embedding import ItemEmbedding

__all__ = ["ItemEmbedding"]
