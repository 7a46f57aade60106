"""Dynamic sparse embeddings: raw IDs, admission, eviction, a tiered store, prefetching (see table.py)."""
