"""Optuna sweeps (``genrec-train -m hparams_search=<preset>``, genrec/sweep): the best trial beside the preset's runs.
"""
from __future__ import annotations

import statistics

from scripts.docs.tables.common import COLUMNS, _budget, _cell


def tables(files: list[dict]) -> list[str]:
    """Optuna sweeps (``genrec-train -m hparams_search=<preset>``, genrec/sweep): the best trial's test metrics beside
    the preset's own runs (``<study>_seed*``) and the baselines measured in the best trial's run, the trials'
    outcomes, the search space and the parameter importances."""
    out = []
    for r in files:
        if r.get("kind") != "hparams_search" or not r.get("best_trial"):
            continue
        best = r["best_trial"]
        run = best["run"]
        preset = [f for f in files if f.get("name", "").startswith(f"{r['study_name']}_seed") and "metrics" in f]
        retried = [t for t in r["trials"] if t.get("retry_of") is not None]
        epochs = best["config"].get("trainer", {}).get("max_epochs")
        out += [f"## Hyperparameter search: {r['study_name']}", "",
                f"`results/{r['name']}.json` (`genrec-train -m hparams_search={r['study_name']} "
                f"{' '.join(a for a in r['arguments'] if not a.startswith('hparams_search='))}`, commit "
                f"`{r['commit'][:12]}`): {r['n_trials']} trials of Optuna's {r['sampler']} with the {r['pruner']} "
                f"(trials of at most {epochs} epochs), the study in SQLite. Outcomes: "
                + ", ".join(f"{n} {state.lower()}" for state, n in sorted(r["states"].items()))
                + "".join(f"; trial {t['retry_of']}, interrupted when the sweep was stopped (SIGKILL), counted as "
                          f"failed and was retried as trial {t['number']} "
                          + ("resuming its run folder" if t["run_dir"].endswith(f"trial_{t['retry_of']}")
                             else "from the start") + f" (then {t['state'].lower()})" for t in retried)
                + f". Best trial {best['number']} (validation score {r['direction']}d: {best['value']:.4f}): "
                + ", ".join(f"`{k}={v:.3g}`" if isinstance(v, float) else f"`{k}={v}`"
                            for k, v in best["params"].items()) + ".", "",
                "| model | " + " | ".join(COLUMNS) + " | note |", "|---" * (len(COLUMNS) + 2) + "|",
                f"| {run['model']} (best trial) | " + " | ".join(f"{run['metrics']['test'][c]:.4f}" for c in COLUMNS)
                + f" | {run['epochs_run']} epochs (best {run['best_epoch']}) |"]
        if preset:
            out.append(f"| {preset[0]['model']} (preset `{r['study_name']}`) | "
                       + " | ".join(_cell([p["metrics"]["test"][c] for p in preset]) for c in COLUMNS)
                       + f" | seeds {', '.join(str(p['seed']) for p in preset)}; {_budget(preset)} |")
        for name, baseline in sorted(run["baselines"].items()):
            out.append(f"| {name} | " + " | ".join(f"{baseline['test'][c]:.4f}" for c in COLUMNS)
                       + " | the best trial's run |")
        verdicts = []
        for metric in ("recall@10", "ndcg@10"):
            name, baseline = max(run["baselines"].items(), key=lambda kv: kv[1]["test"][metric])
            score = run["metrics"]["test"][metric]
            verdicts.append(f"on {metric} the best trial ({score:.4f}) "
                            + ("beats" if score > baseline["test"][metric] else "does **not** beat")
                            + f" the best baseline (`{name}`, {baseline['test'][metric]:.4f})")
        if preset:
            verdicts.append(f"its trials ran at most {epochs} epochs, the preset's runs "
                            f"{statistics.mean(p['epochs_run'] for p in preset):.0f} on average")
        out += ["", "Plainly: " + "; ".join(verdicts) + "."]
        space = ", ".join(f"`{k}`: `{v}`" for k, v in r["params"].items())
        importances = ", ".join(f"`{k}` {v:.2f}" for k, v in r["importances"].items()) or "–"
        out += ["", f"Search space: {space}. Parameter importances (Optuna's default evaluator over the completed "
                    f"trials): {importances}. Plots beside the sweep: {', '.join(r['plots'])}.", ""]
    return out
