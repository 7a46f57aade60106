"""Semantic-ID tokenizers: item content -> embeddings -> residual codes -> a unique code tuple per item.

``encoders`` (text, categorical, collaborative, file) -> ``rkmeans`` / ``rqvae`` (quantizers) -> ``collisions``
-> :class:`~genrec.tokenize.sid_table.SIDTable` (saved as Parquet + safetensors) and a ``health`` report; the
``cli`` ties them together (``genrec-tokenize``). Importing this package loads only the table's loader (numpy,
pyarrow, safetensors).
"""
from genrec.tokenize.sid_table import SIDTable

__all__ = ["SIDTable"]
