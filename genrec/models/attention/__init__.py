"""Attention implementations behind one config switch (``model.encoder.attention``); see :mod:`.registry`."""
from genrec.models.attention import hstu, kernels, softmax  # noqa: F401  (registers the implementations)
from genrec.ops.hstu import RelativeBias, time_bucket
from genrec.models.attention.registry import AUTO, check_name, names, register, resolve

__all__ = ["AUTO", "RelativeBias", "check_name", "names", "register", "resolve", "time_bucket"]
