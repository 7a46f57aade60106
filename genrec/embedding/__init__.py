"""Embedding modules built on TorchRec collections (unsharded here; genrec.dist shards them)."""
from genrec.embedding.item_embedding import ItemEmbedding, ItemEmbeddingInterface
from genrec.embedding.tables import EmbeddingTables, TableConfig

__all__ = ["EmbeddingTables", "ItemEmbedding", "ItemEmbeddingInterface", "TableConfig"]
