"""Storage on local disk: embedded stores of fixed-size records keyed by int64 (:mod:`genrec.storage.stores`: the
store interface, RocksDB, LMDB and ``open_store`` for every backend; :mod:`genrec.storage.slab`: the slab store),
durable writes (:mod:`genrec.storage.durable`) and C sources built at first use (:mod:`genrec.storage.compiled`).
"""
