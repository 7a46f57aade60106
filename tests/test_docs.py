"""Docs that cannot rot: every shell command in README.md and the guides is checked (genrec's CLIs composed by Hydra
with genrec-train's own checks before data, scripts and their flags found, make targets found), and every figure in
the hand-written docs comes from the results file it cites (scripts/docs/figures.py), none typed by hand."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from genrec.conf import compose_config
from genrec.data.preprocess import PreprocessConfig
from genrec.data.split import SplitConfig
from genrec.training.fit import check_train_config
from genrec.training.stages import check_stage
from genrec.training.tables import check_table_config
from scripts.docs import figures

ROOT = Path(__file__).resolve().parents[1]
COMMAND_DOCS = [ROOT / "README.md", ROOT / "docs" / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
#: the hand-written docs whose every figure must be a marker (the others still carry figures typed by hand)
FIGURE_DOCS = COMMAND_DOCS
CLIS = {"genrec-train": "train", "genrec-eval": "eval", "genrec-export": "export", "genrec-tokenize": "tokenize",
        "genrec-stream": "stream"}
MODULES = {"genrec.train": "train", "genrec.evaluate": "eval", "genrec.export": "export",
           "genrec.tokenize": "tokenize", "genrec.stream": "stream"}
MARKERS = ("GPU", "real data", "GPU, real data")


def commands(path: Path) -> list[tuple[int, list[str]]]:
    """``(line, words)`` of every command in the file's ```bash blocks (environment assignments dropped)."""
    out, block = [], None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            block = line[3:].strip() if block is None else None
            continue
        if block != "bash" or not line.strip():
            continue
        command, _, comment = line.partition(" # ")
        assert not comment or comment.strip() in MARKERS, f"{path.name}:{number}: a comment that is not a marker"
        words = shlex.split(command)
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words = words[1:]
        out.append((number, words))
    return out


def _compose(name: str, args: list[str]) -> None:
    """Compose ``args`` (placeholders filled, a ``-m`` sweep's first values) and run genrec-train's checks."""
    multirun = "-m" in args
    overrides = []
    for arg in (re.sub(r"<[^<>]+>", "placeholder", a) for a in args if a != "-m"):
        if multirun:
            override = OverridesParser.create().parse_overrides([arg])[0]
            if override.is_sweep_override():
                arg = f"{override.get_key_element()}={next(iter(override.sweep_string_iterator()))}"
        overrides.append(arg)
    cfg = compose_config(name, overrides)
    if name == "train":
        check_train_config(cfg)
        check_table_config(cfg)
        SplitConfig.from_config(cfg.data.get("split"))
        PreprocessConfig.from_config(cfg.data.get("preprocess"))
        check_stage(cfg)


def problems(path: Path) -> list[str]:
    """Every command of ``path`` that does not check out, as ``file:line: why``."""
    makefile, out, previous = (ROOT / "Makefile").read_text(), [], None
    for number, words in commands(path):
        where = f"{path.relative_to(ROOT)}:{number}"
        program, args = words[0], words[1:]
        if program in ("python", "python3") and args[:1] == ["-m"] and args[1] in MODULES:
            program, args = args[1], args[2:]
        module = program in ("python", "python3") and args[:1] == ["-m"] and args[1:2] != [] \
            and args[1].startswith("scripts.")
        if module:  # python -m scripts.bench.bench_x: the file scripts/bench/bench_x.py
            args = [args[1].replace(".", "/") + ".py", *args[2:]]
        name = CLIS.get(program) or MODULES.get(program)
        try:
            if name:
                if args[:1] == ["..."]:  # the previous command's overrides, and these
                    assert previous and previous[0] == name, "'...' continues no command of the same CLI"
                    args = previous[1] + args[1:]
                previous = (name, args)
                _compose(name, args)
            elif program in ("python", "python3", "bash") and args and not args[0].startswith("-"):
                script = ROOT / args[0]
                assert script.is_file(), f"no file {args[0]}"
                nested = program != "bash" and args[0].startswith("scripts/") and args[0].count("/") > 1
                assert module or not nested, f"run {args[0]} as python -m {args[0][:-3].replace('/', '.')}"
                text = script.read_text()
                unknown = [a.split("=")[0] for a in args[1:] if a.startswith("--") and a.split("=")[0] not in text]
                assert not unknown, f"{args[0]} takes no {unknown}"
            elif program == "make":
                missing = [t for t in args if not re.search(rf"^{re.escape(t)}:", makefile, re.M)]
                assert not missing, f"no make target {missing}"
        except Exception as err:  # one line per command: the test lists them all
            out.append(f"{where}: {' '.join(words)}: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
    return out


@pytest.mark.parametrize("path", COMMAND_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_command_checks_out(path):
    assert problems(path) == []


def test_a_broken_command_is_caught(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text("```bash\ngenrec-train model=sasrecc\ngenrec-train trainer.max_epochz=3\n"
                   "genrec-eval run_dir=x checkpoint=last\npython scripts/nothing.py\nmake nothing\n"
                   "python -m scripts.bench.b --quick\npython -m scripts.bench.b --slow\npython -m scripts.bench.c\n"
                   "python scripts/bench/b.py --quick\n```\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "Makefile").write_text("test:\n")
    (tmp_path / "scripts" / "bench").mkdir(parents=True)
    (tmp_path / "scripts" / "bench" / "b.py").write_text('parser.add_argument("--quick")\n')
    found = problems(doc)
    assert [line.split(":")[1] for line in found] == ["2", "3", "5", "6", "8", "9", "10"], found


def test_every_figure_in_the_docs_is_its_results_file_s(tmp_path):
    assert [p for path in figures.hand_written_docs() for p in figures.stale(path)] == []


@pytest.mark.parametrize("path", FIGURE_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_figure_is_typed_by_hand(path):
    assert figures.naked_figures(path) == []


def test_a_stale_or_naked_figure_is_caught(tmp_path):
    result = tmp_path / "bench.json"
    result.write_text('{"prefetch": {"ratio": [1.4837, 1.2]}}')
    doc = tmp_path / "doc.md"
    doc.write_text(f"right <!-- fig {result} prefetch/ratio/0 .2f|x -->1.48x<!-- /fig -->, "
                   f"stale <!-- fig {result} prefetch/ratio/1 .2f|x -->1.48x<!-- /fig -->, typed 1.57x, `code 1.5x`\n")
    assert [p.split(": ", 1)[1] for p in figures.stale(doc)] == [f"{result} prefetch/ratio/1 is 1.20x, the doc says "
                                                                 "1.48x"]
    assert [p.split(": ", 1)[1] for p in figures.naked_figures(doc)] == ["1.57x"]
    assert figures.fill(doc.read_text()).count("-->1.20x<!--") == 1
