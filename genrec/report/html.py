"""The report page: one self-contained HTML file (inline CSS, inline JavaScript, the data as inline JSON).

Tables are written here (they read without JavaScript); the charts are drawn in the browser by ``report.js`` as
inline SVG from the JSON embedded in the page. Nothing is loaded from anywhere else.
"""
from __future__ import annotations

import html
import json
from datetime import datetime, timezone
from importlib.resources import files
from typing import Any, Iterable

from genrec.report.collect import RunData, config_diff, finite

PARTS = ("data", "forward", "backward", "optimizer", "other")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _number(value: Any, spec: str = ".4f") -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a" if value is None else _e(value)
    return format(value, spec)


def _table(header: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """A table from already escaped cells."""
    head = "".join(f"<th>{cell}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _name(run: RunData, runs: list[RunData]) -> str:
    return _e(run.model if len(runs) == 1 else f"{run.model} ({run.label})")


def overview(runs: list[RunData]) -> str:
    rows = []
    for run in runs:
        m = run.metrics or {}
        dataset = m.get("dataset") or {}
        rows.append([_e(run.label), _e(run.model), _e(dataset.get("name", run.config.get("data.name", "?"))),
                     _e(f"{dataset.get('users', '?')} / {dataset.get('items', '?')}"),
                     _e(run.config.get("seed", "?")), _e(m.get("epochs_run", "?")), _e(m.get("best_epoch", "?")),
                     _e(m.get("steps_run", "?")), _number(m.get("train_seconds"), ".1f"),
                     _e(str(m.get("commit", "?"))[:12]), _e(m.get("created", "?")),
                     "finished" if run.metrics else "<b>not finished</b>"])
    return _table(["run", "model", "dataset", "users / items", "seed", "epochs", "best epoch", "steps",
                   "train s", "commit", "created", "status"], rows)


def test_metrics(runs: list[RunData], columns: list[str], monitor: str) -> str:
    """Test metrics of every finished run and the baselines measured in the first finished run, with a plain
    statement of whether each model beats every baseline on ``monitor``."""
    finished = [run for run in runs if run.metrics]
    if not finished:
        return "<p>No run has finished: no test metrics yet.</p>"
    rows, verdicts = [], []
    baselines = {name: b["test"] for name, b in (finished[0].metrics.get("baselines") or {}).items()}
    for run in finished:
        test = run.metrics["metrics"]["test"]
        rows.append([f"<b>{_name(run, runs)}</b>"] + [_number(test.get(c)) for c in columns])
        if baselines and monitor in test:
            best_name, best = max(((n, b.get(monitor, float("-inf"))) for n, b in baselines.items()),
                                  key=lambda item: item[1])
            beats = test[monitor] > best
            verdicts.append(f"<li>{_name(run, runs)} {'beats' if beats else '<b>does not beat</b>'} the best baseline "
                            f"on test {_e(monitor)}: {test[monitor]:.4f} vs {_e(best_name)} {best:.4f}</li>")
    for name, test in baselines.items():
        rows.append([_e(name)] + [_number(test.get(c)) for c in columns])
    source = f"<p class=\"note\">Baselines measured by genrec's evaluation in {_e(finished[0].label)}.</p>" \
        if len(runs) > 1 and baselines else ""
    return _table(["model / baseline"] + [_e(c) for c in columns], rows, "metrics") + source + \
        (f"<ul>{''.join(verdicts)}</ul>" if verdicts else "")


def telemetry_table(runs: list[RunData]) -> str:
    rows = []
    for run in runs:
        t = (run.metrics or {}).get("telemetry")
        if not t:
            continue
        gpu = t.get("gpu") or {}
        if "skipped" in gpu:
            gpu_text = _e(f"skipped: {gpu['skipped']}")
        elif gpu:
            gpu_text = _e(f"{gpu['util_pct_mean']:.0f}% util, {gpu['gpu_memory_used_gib']:.2f} GiB")
        else:
            gpu_text = "n/a"
        shares = t.get("parts_share") or {}
        rows.append([_e(run.label), _e(t.get("steps")), _number(t.get("samples_per_s"), ",.1f"),
                     _number(t.get("positions_per_s"), ",.0f"), _number((t.get("step_ms") or {}).get("mean"), ".2f"),
                     _number((t.get("step_ms") or {}).get("median"), ".2f")]
                    + [_number(shares.get(p), ".1%") for p in PARTS]
                    + [_number(t.get("peak_rss_gib"), ".2f"), gpu_text])
    if not rows:
        return "<p>No telemetry summary (the runs have not finished, or trained with telemetry.enabled=false).</p>"
    return _table(["run", "steps", "sequences/s", "positions/s", "step ms (mean)", "step ms (median)"]
                  + [f"{p} share" for p in PARTS] + ["peak RSS GiB", "GPU"], rows) + \
        "<p class=\"note\">Per process, over the steps the last training process ran (a resumed run counts from its " \
        "resume); host wall-clock times.</p>"


def tokenizer_tables(runs: list[RunData]) -> str:
    out = []
    for run in runs:
        t = run.tokenizer
        if not t:
            continue
        health = t.get("health") or {}
        levels = [[_e(level.get("level")), _e(level.get("kind")), _e(level.get("codes")), _e(level.get("used")),
                   _number(level.get("usage"), ".1%"), _number(level.get("normalized_entropy"), ".3f"),
                   _number(level.get("perplexity"), ".1f"), _e(level.get("max_items_per_code"))]
                  for level in health.get("levels", [])]
        before, after = health.get("collisions_before") or {}, health.get("collisions_after") or {}
        recon = health.get("reconstruction") or {}
        encoder = (t.get("encoder") or {}).get("name", "?")
        sizes = (t.get("sid_table") or {}).get("codebook_sizes", "?")
        out.append(f"<h3>{_e(run.label)}: {_e(t.get('tokenizer', '?'))} over {_e(encoder)} embeddings, codebooks "
                   f"{_e(sizes)}</h3>"
                   + _table(["level", "kind", "codes", "used", "usage", "normalised entropy", "perplexity",
                             "max items / code"], levels)
                   + f"<p>Colliding items: {_e(before.get('colliding_items', '?'))} "
                     f"({_number(before.get('collision_rate'), '.2%')}) before resolution "
                     f"({_e(t.get('collisions', '?'))}), {_e(after.get('colliding_items', '?'))} after. "
                     f"Reconstruction error: {_number(recon.get('relative'), '.4f')} of the embeddings' variance.</p>")
    return "".join(out)


def config_section(runs: list[RunData]) -> str:
    out = []
    if len(runs) > 1:
        diff = config_diff(runs)
        rows = [[f"<code>{_e(key)}</code>"] + [_e(json.dumps(v, default=str)) for v in values]
                for key, values in diff.items()]
        out.append(f"<h3>Keys that differ ({len(diff)})</h3>" + (_table(["key"] + [_e(r.label) for r in runs], rows,
                                                                        "diff") if rows else
                                                                 "<p>The configs are identical.</p>"))
    for run in runs:
        rows = [[f"<code>{_e(key)}</code>", _e(json.dumps(value, default=str))] for key, value in run.config.items()]
        out.append(f"<details><summary>Full config of {_e(run.label)} ({len(rows)} keys)</summary>"
                   f"{_table(['key', 'value'], rows, 'config')}</details>")
    return "".join(out)


def chart_data(runs: list[RunData], monitor: str) -> dict[str, Any]:
    """What report.js draws."""
    return finite({"monitor": monitor, "runs": [
        {"label": run.label, "model": run.model, "curves": run.curves,
         "telemetry": (run.metrics or {}).get("telemetry"),
         "evaluation": run.evaluation and {"model": run.evaluation["model"], "baselines": run.evaluation["baselines"]},
         "tokenizer": run.tokenizer and {"levels": run.tokenizer.get("health", {}).get("levels", []),
                                         "prefixes": run.tokenizer.get("health", {}).get("prefixes", [])}}
        for run in runs]})


def _inline_json(data: Any) -> str:
    """JSON safe inside a <script> element (no ``</`` that could close it)."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def render(runs: list[RunData]) -> str:
    """The whole page for one run or a comparison of several."""
    first = runs[0].config
    monitor = str(first.get("eval.monitor", "ndcg@10"))
    ks = first.get("eval.ks") or [10]
    columns = [f"{m}@{k}" for k in ks for m in ("recall", "ndcg")] + ["mrr"]
    title = runs[0].label if len(runs) == 1 else f"{len(runs)} runs compared"
    notes = "".join(f"<li>{_e(run.label)}: {_e(note)}</li>" for run in runs for note in run.notes)
    has_eval = any(run.evaluation for run in runs)
    has_sid = any(run.tokenizer for run in runs)
    sections = [
        ("overview", "Runs", overview(runs) + (f"<ul class=\"notes\">{notes}</ul>" if notes else "")),
        ("metrics", "Test metrics", test_metrics(runs, columns, monitor)),
        ("curves", "Training curves", '<div class="charts" id="curves-charts"></div>'),
        ("telemetry", "Throughput and memory",
         telemetry_table(runs) + '<div class="charts" id="telemetry-charts"></div>'),
        ("breakdowns", "Evaluation breakdowns",
         '<p class="note">From genrec-eval (<code>eval/metrics.json</code>): test metrics by the user\'s history '
         'length, the target\'s popularity in training and cold targets; the groups partition the users.</p>'
         '<div id="breakdown-charts"></div>' if has_eval else
         "<p>No run has been evaluated with genrec-eval yet (<code>genrec-eval run_dir=&lt;run&gt;</code>).</p>"),
    ]
    if has_sid:
        sections.append(("tokenizer", "Tokenizer health (semantic IDs)",
                         tokenizer_tables(runs) + '<div class="charts" id="tokenizer-charts"></div>'))
    sections.append(("config", "Config" if len(runs) == 1 else "Config diff", config_section(runs)))
    nav = " · ".join(f'<a href="#{key}">{_e(name)}</a>' for key, name, _ in sections)
    body = "".join(f'<section id="{key}"><h2>{_e(name)}</h2>{content}</section>' for key, name, content in sections)
    assets = files("genrec.report")
    created = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>genrec report: {_e(title)}</title><style>{assets.joinpath('report.css').read_text()}</style>"
            f"</head><body><header><h1>genrec report: {_e(title)}</h1>"
            f'<p class="note">Written by genrec-report on {created} from {", ".join(_e(r.path) for r in runs)}.</p>'
            f"<nav>{nav}</nav></header><main>{body}</main>"
            f'<script type="application/json" id="report-data">{_inline_json(chart_data(runs, monitor))}</script>'
            f"<script>{assets.joinpath('report.js').read_text()}</script></body></html>\n")
