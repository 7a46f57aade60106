"""genrec: generative recommendation (semantic IDs, sequence models, TorchRec sharding, Hydra + Lightning)."""
__version__ = "0.1.0"
