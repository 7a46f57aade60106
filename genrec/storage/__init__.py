"""Embedded stores of fixed-size records keyed by int64 (the tier 2 of dynamic tables): :mod:`genrec.storage.slab`.

RocksDB and LMDB stores and the store interface still live in :mod:`genrec.embedding.dynamic.store`, which opens
every backend (``open_store``).
"""
