"""What a config may call: every ``_target_`` genrec calls or instantiates is resolved here, by one function.

A name is trusted by what it resolves to, never by how it is spelt. ``genrec.data.cache.os.system`` starts with
``genrec.`` but walks through a module's globals to ``os.system``; :func:`resolve_target` refuses it because

* only modules the allow-list covers are imported (``importlib.import_module`` on the longest such prefix),
* the rest of the name is one attribute of that module (never a walk through a module's globals, a class or an
  instance), and it must be a class or a Python function that the allow-list trusts.

An allow-list entry ending in ``.`` is a package (``torch.optim.``: objects *defined* in that package, by their
``__module__``, so ``torch.optim.adamw.Tensor`` is refused); any other entry is one object's full name. The default
list, :data:`TRUSTED_TARGETS`, is torch's optimizers, Lightning's callbacks and loggers, and exactly the ``_target_``
values of genrec's own config tree (``genrec/conf``): a run folder cannot reach any other genrec function, such as
one that writes files. ``allowed=None`` (the command line the user typed is trusted) keeps the safe walk only.
docs/TRUST.md has the threat model.
"""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, ListConfig, OmegaConf

from genrec.errors import DataError

#: the packages a config read from a run folder may name objects of
TRUSTED_PACKAGES = ("torch.optim.", "lightning.pytorch.callbacks.", "lightning.pytorch.loggers.")


def config_tree_targets() -> tuple[str, ...]:
    """Every ``_target_`` value written in genrec's config tree (``genrec/conf/**/*.yaml``), sorted."""
    conf = Path(__file__).parent / "conf"
    found = {m.group(1) for f in conf.rglob("*.yaml") for m in re.finditer(r"_target_:\s*([\w.]+)", f.read_text())}
    return tuple(sorted(found))


#: the default allow-list of a run folder's config: :data:`TRUSTED_PACKAGES` + :func:`config_tree_targets`
TRUSTED_TARGETS = TRUSTED_PACKAGES + config_tree_targets()


def _under(name: str, parent: str) -> bool:
    """Whether the dotted ``name`` is ``parent`` or below it."""
    return name == parent or name.startswith(parent + ".")


def _may_import(module: str, allowed: tuple[str, ...] | None) -> bool:
    """A module may be imported when it lies in a trusted package or on the path of a trusted full name."""
    return allowed is None or any(_under(module, e[:-1]) if e.endswith(".") else _under(e, module) for e in allowed)


def _trusted(written: str, obj: Any, allowed: tuple[str, ...] | None) -> bool:
    home = getattr(obj, "__module__", None) or ""
    canonical = f"{home}.{obj.__qualname__}"
    return allowed is None or any(_under(home, e[:-1]) if e.endswith(".") else e in (written, canonical)
                                  for e in allowed)


def _describe(allowed: tuple[str, ...]) -> str:
    packages = [e for e in allowed if e.endswith(".")]
    names = [e for e in allowed if not e.endswith(".")]
    tree = set(config_tree_targets())
    extra = [n for n in names if n not in tree]
    return ", ".join(packages + (["the _target_ values of genrec's config tree"] if tree & set(names) else []) + extra)


def _import_longest(parts: list[str], allowed: tuple[str, ...] | None, refuse: Callable[[str], DataError]
                    ) -> tuple[Any, int]:
    """The module named by the longest prefix of ``parts`` that may be imported (:func:`_may_import`) and that
    imports, and how many parts it took; ``(None, 0)`` when none does."""
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if not _may_import(name, allowed):
            continue
        try:
            return importlib.import_module(name), n
        except ModuleNotFoundError as err:
            if err.name is None or not name.startswith(err.name):  # it exists, but one of its imports is missing
                raise refuse(f"importing {name} failed: {err}") from None
    return None, 0


def resolve_target(target: Any, allowed: tuple[str, ...] | None = TRUSTED_TARGETS, source: str | Path = "config",
                   key: str = "_target_") -> Callable[..., Any]:
    """The class or function ``target`` names, resolved safely (see the module doc); a :class:`DataError` naming
    ``source`` and ``key`` when it is not a trusted callable. ``allowed``: the allow-list (``None``: any module)."""
    def refuse(why: str) -> DataError:
        listed = f" (trusted: {_describe(allowed)})" if allowed is not None else ""
        return DataError(source, f"_target_ {target!r} is not a trusted callable: {why}{listed}; a config may only "
                                 "name classes and functions defined in trusted modules", key=key)

    parts = target.split(".") if isinstance(target, str) else []
    if len(parts) < 2 or not all(p.isidentifier() and not p.startswith("_") for p in parts):
        raise refuse("expected a dotted name of public identifiers (module.object)")
    module, n = _import_longest(parts, allowed, refuse)
    if module is None:
        raise refuse("no trusted module of that name can be imported")
    if n != len(parts) - 1:
        raise refuse(f"{'.'.join(parts[:n + 1])} is not a trusted module; a name is a module and one object in it")
    obj = getattr(module, parts[-1], None)
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        raise refuse(f"{module.__name__} has no class or Python function {parts[-1]!r}")
    if not _trusted(target, obj, allowed):
        raise refuse(f"it resolves to {obj.__module__}.{obj.__qualname__}, which the allow-list does not name")
    return obj


def call_target(node: dict | DictConfig, allowed: tuple[str, ...] | None = None, source: str | Path = "config",
                key: str = "_target_", drop: tuple[str, ...] = ()) -> Any:
    """Call the callable ``node["_target_"]`` names (:func:`resolve_target`) with the node's other keys (except
    ``drop``). Unlike ``hydra.utils.instantiate``, the callable's own :class:`~genrec.errors.UserError` passes
    through unwrapped, so a CLI prints it as one line."""
    kwargs = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    for name in drop:
        kwargs.pop(name, None)
    return resolve_target(kwargs.pop("_target_", None), allowed, source, key)(**kwargs)


def check_targets(cfg: DictConfig | ListConfig, source: str | Path, allowed: tuple[str, ...] = TRUSTED_TARGETS
                  ) -> None:
    """Resolve every ``_target_`` in ``cfg`` (at any depth, as written: an interpolation is refused, never resolved)
    with :func:`resolve_target`; the first one that is not trusted raises :class:`DataError` naming ``source`` and
    its key."""
    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            if "_target_" in node:
                resolve_target(node["_target_"], allowed, source, f"{key}._target_".lstrip("."))
            for child, value in node.items():
                walk(value, f"{key}.{child}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{key}[{i}]")

    walk(OmegaConf.to_container(cfg, resolve=False), "")
