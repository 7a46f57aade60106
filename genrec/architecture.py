"""genrec's layers: which part of the package may import which. One source for the test that enforces it
(tests/test_package.py) and for the diagram in docs/ARCHITECTURE.md (:func:`render`, checked by the same test).

A unit is a subpackage or a module (the longest name that matches wins: ``genrec.tokenize.sid_table`` is a unit of
its own, below the rest of ``genrec.tokenize``). A unit may import units of lower layers and itself, never a unit of
its own layer or above. The command-line entry points sit on top, and none imports another (a package's
``__main__``, which only calls its CLI's ``main``, counts as that CLI).
"""
from __future__ import annotations

#: bottom to top: (layer name, {unit: what it holds})
LAYERS: list[tuple[str, dict[str, str]]] = [
    ("base", {"genrec": "the version", "genrec.errors": "the errors a user can fix",
              "genrec.conf": "the Hydra config tree"}),
    ("foundation", {"genrec.utils": "provenance, integrity seals", "genrec.trust": "what a config may call",
                    "genrec.cli": "the one-line error policy of every CLI"}),
    ("ops", {"genrec.ops": "jagged ops, sampled logits"}),
    ("data", {"genrec.data": "readers, sequences, splits, batches",
              "genrec.storage": "embedded stores, durable writes, C sources built at first use",
              "genrec.tokenize.sid_table": "the semantic-ID table (item <-> codes)"}),
    ("tables", {"genrec.embedding": "item tables: static (TorchRec), dynamic (tiered)"}),
    ("models", {"genrec.models": "encoders, recommenders, generators, losses, beam search, count baselines",
                "genrec.dist": "sharding plans, the TorchRec strategy, distributed checkpoints"}),
    ("run folders", {"genrec.runs": "a run folder read as data"}),
    ("content", {"genrec.tokenize": "item content encoders, quantizers, SID tables",
                 "genrec.sweep": "Optuna sweeps"}),
    ("evaluation", {"genrec.eval": "metrics, breakdowns, baselines, cold start"}),
    ("training", {"genrec.training": "tasks, stages, the Lightning trainer, checkpoints"}),
    ("serving", {"genrec.export": "vectors, towers, indexes, manifests", "genrec.report": "HTML reports"}),
    ("streaming", {"genrec.stream": "online training from event streams"}),
    ("command line", {"genrec.train": "genrec-train", "genrec.evaluate": "genrec-eval",
                      "genrec.export.cli": "genrec-export", "genrec.tokenize.cli": "genrec-tokenize",
                      "genrec.stream.cli": "genrec-stream", "genrec.report.cli": "genrec-report"}),
]

#: unit -> its layer's index
LAYER_OF = {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str | None:
    """The unit a genrec module belongs to (the longest unit name it starts with), or None outside genrec."""
    if module.endswith(".__main__") and f"{module[:-9]}.cli" in LAYER_OF:
        return f"{module[:-9]}.cli"
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in LAYER_OF:
            return name
    return None


def allowed(importer: str, imported: str) -> bool:
    """Whether module ``importer`` may import module ``imported`` (both genrec modules)."""
    a, b = unit_of(importer), unit_of(imported)
    return a == b or LAYER_OF[b] < LAYER_OF[a]


def render() -> str:
    """The layer diagram of docs/ARCHITECTURE.md: top layer first, each importing only the layers below it."""
    lines = []
    for i, (name, units) in reversed(list(enumerate(LAYERS))):
        lines.append(f"{i}  {name}")
        lines += [f"     {unit:<26} {what}" for unit, what in units.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
