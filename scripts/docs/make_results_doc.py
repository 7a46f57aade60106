"""Generate docs/results.md (the summary) and docs/results/<page>.md from results/*.json, and results/archive/README.md
from the superseded research arms' files in results/archive/ (loaded with ``archived: True``); every figure in them
comes from one of those files.

Each page is a Markdown template in scripts/docs/templates/ (``results.md``: the summary; ``archive.md``:
results/archive/README.md; any other file: the detail page of its name, titled by its first line,
``# Results: <title>``), filled here:

- a line ``{{ package.module.function }}`` by the lines that renderer returns for the results files (each kind's
  renderer lives beside the code that writes that kind: in ``scripts/bench/bench_X.py`` or a sibling
  ``bench_X_tables.py``, ``scripts/analysis/X_tables.py``, ``scripts/recipes/X_tables.py``, and for genrec's own
  CLIs in ``scripts/docs/tables/``), so adding a section is adding its line to a template;
- a line ``{{ prose:KEY }}``, in a template or in a renderer's output (``scripts.docs.tables.common.prose``), by the
  lines between ``<!-- prose:KEY -->`` and ``<!-- /prose -->`` in any template (after the page itself), or by
  nothing where no template holds KEY: fixed text lives in the templates, computed text in the renderers;
- in the summary, ``{{ title:PAGE }}`` and ``{{ sections:PAGE }}`` by that page's title and its sections' headings.

Usage: python -m scripts.docs.make_results_doc  (or `make results`)
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

from genrec.utils.results import load_result

ROOT = Path(__file__).resolve().parents[2]
RESULTS, DOC, TEMPLATES = ROOT / "results", ROOT / "docs" / "results.md", Path(__file__).parent / "templates"
ARCHIVE = RESULTS / "archive"
RENDERER, PROSE = re.compile(r"\{\{ ([\w.]+) \}\}"), re.compile(r"\{\{ prose:(\S+) \}\}")
BLOCK, INDEX = re.compile(r"<!-- prose:(\S+) -->"), re.compile(r"\{\{ (title|sections):(\w+) \}\}")


def read_template(path: Path) -> tuple[list[str], dict[str, list[str]]]:
    """A template -> its page's lines (those before its first prose block, trailing blank lines dropped) and its
    prose blocks by key."""
    page, blocks, key = [], {}, None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if key is not None:
            if line == "<!-- /prose -->":
                key = None
            else:
                blocks[key].append(line)
        elif BLOCK.fullmatch(line):
            key = BLOCK.fullmatch(line)[1]
            if key in blocks:
                raise SystemExit(f"{path}:{number}: a second prose block {key}")
            blocks[key] = []
        elif blocks and line:
            raise SystemExit(f"{path}:{number}: text outside a prose block after the page")
        elif not blocks:
            page.append(line)
    if key is not None:
        raise SystemExit(f"{path}: prose block {key} has no <!-- /prose -->")
    while page and not page[-1]:
        page.pop()
    return page, blocks


def fill(page: list[str], files: list[dict], prose: dict[str, list[str]]) -> list[str]:
    """``page`` with each renderer line replaced by that renderer's lines for ``files``, then each prose line by its
    block."""
    rendered = []
    for line in page:
        match = RENDERER.fullmatch(line)
        if match:
            module, _, function = match[1].rpartition(".")
            rendered += getattr(importlib.import_module(module), function)(files)
        else:
            rendered.append(line)
    return [out for line in rendered for out in (prose.get(PROSE.fullmatch(line)[1], []) if PROSE.fullmatch(line)
                                                 else [line])]


def main() -> None:
    files = [load_result(p) | {"name": p.stem} for p in sorted(RESULTS.glob("*.json"))]
    files += [load_result(p) | {"name": p.stem, "archived": True} for p in sorted(ARCHIVE.glob("*.json"))]
    templates = {p.stem: read_template(p) for p in sorted(TEMPLATES.glob("*.md"))}
    prose = {}
    for stem, (_, blocks) in templates.items():
        if prose.keys() & blocks.keys():
            raise SystemExit(f"prose blocks in more than one template: {sorted(prose.keys() & blocks.keys())}")
        prose |= blocks
    summary, _ = templates.pop("results")
    archive, _ = templates.pop("archive")
    index = {"title": {}, "sections": {}}
    (DOC.parent / "results").mkdir(parents=True, exist_ok=True)
    for stem, (page, _) in templates.items():
        lines = fill(page, files, prose)
        index["title"][stem] = lines[0].removeprefix("# Results: ")
        index["sections"][stem] = "; ".join(line[3:] for line in lines if line.startswith("## ")) or "no results yet"
        (DOC.parent / "results" / f"{stem}.md").write_text("\n".join(lines) + "\n")
    lines = [INDEX.sub(lambda m: index[m[1]][m[2]], line) for line in fill(summary, files, prose)]
    DOC.write_text("\n".join(lines) + "\n")
    (ARCHIVE / "README.md").write_text("\n".join(fill(archive, files, prose)) + "\n")
    print(f"wrote {DOC}, {len(templates)} pages under {DOC.parent / 'results'} and {ARCHIVE / 'README.md'} from "
          f"{len(files)} result files ({sum(1 for f in files if f.get('archived'))} of them archived)")


if __name__ == "__main__":
    main()
