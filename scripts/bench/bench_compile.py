"""``compile=true`` (torch.compile of each model's sequence stacks) against eager on CPU: training-step time of the
generative presets (``experiment=beauty_sid_gpt`` / ``beauty_tiger``) and the retrieval ones (``ml100k_sasrec`` /
``ml100k_hstu``) on their real training batches.

One process builds each model from one seed, copies it and compiles the copy's stacks (the recipe=gpu path:
:func:`genrec.training.builders.compile_stacks`), then times whole training steps (loss, backward, AdamW step, loss
read back) of both on the same batches: the first compiled call (the compile) is timed on its own, then the two
alternate (eager first in odd rounds, compiled first in even ones) for ``--rounds`` rounds; each figure is the
median over rounds of each round's median step. Inductor's on-disk cache goes to a fresh folder per run, so the
first compiled call is a cold compile (what a new process pays without an earlier run's cache). The generative
presets get a random SID table of the dataset's items (3 levels of 256 codes, no collisions): the step's cost
depends on the table's shape, not on its codes.

Needs the datasets under ``$GENREC_DATA_DIR`` (default ``../shared/data``); a preset whose data is missing is
skipped with the reason. Usage::

    nice -n 5 python -m scripts.bench.bench_compile          # writes results/bench_compile.json
    python -m scripts.bench.bench_compile --models sid_gpt --steps 3 --rounds 2 --out /tmp/bench_compile.json
"""
from __future__ import annotations

import argparse
import atexit
import copy
import os
import shutil
import tempfile
from pathlib import Path

# before torch reads it: compiles of earlier runs (the default cache is shared under /tmp) must not be reused
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_compile_inductor_")
atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

PRESETS = {"sid_gpt": "beauty_sid_gpt", "tiger": "beauty_tiger", "sasrec": "ml100k_sasrec", "hstu": "ml100k_hstu"}
MODES = ("eager", "compiled")
SID_LEVELS = (256, 256, 256)


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    p.add_argument("--steps", type=int, default=5, help="timed steps per mode per round (distinct batches)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steadiest on a shared machine)")
    p.add_argument("--out", default=str(ROOT / "results" / "bench_compile.json"))
    return p.parse_args()


def random_sid_table(item_raw_ids: np.ndarray, dataset: str, folder: Path) -> Path:
    """A SID table giving every item a distinct random tuple of :data:`SID_LEVELS` codes, saved in ``folder``."""
    from genrec.tokenize.sid_table import PAD_CODE, SIDTable

    count = len(item_raw_ids) - 1
    flat = np.random.default_rng(0).choice(int(np.prod(SID_LEVELS)), count, replace=False)
    codes = np.stack(np.unravel_index(flat, SID_LEVELS), axis=1)
    SIDTable(np.vstack([np.full((1, len(SID_LEVELS)), PAD_CODE), codes]), SID_LEVELS, item_raw_ids,
             dataset=dataset).save(folder)
    return folder


def time_steps(experiment: str, steps: int, rounds: int, tmp: Path) -> dict:
    """Eager vs compiled training steps of one preset -> s/step per mode, the compile call's seconds, shapes."""
    import torch

    from genrec.conf import compose_config
    from genrec.data.datamodule import load_dataset
    from genrec.training.builders import build_datamodule, build_task, compile_stacks
    from scripts.bench.step_timing import alternating_medians, optimizer_of, train_step_seconds

    cfg = compose_config("train", [f"experiment={experiment}"])
    if cfg.model.get("kind") == "generative":
        data = load_dataset(cfg.data.reader, cfg.data.preprocess, cfg.data.cache_dir)
        cfg = compose_config("train", [f"experiment={experiment}",
                                       f"sid_table={random_sid_table(data.item_raw_ids, data.name, tmp / experiment)}"])
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    loader = iter(datamodule.train_dataloader())
    batches = [next(loader) for _ in range(steps)]
    torch.manual_seed(0)
    tasks = {"eager": build_task(cfg, datamodule.data.num_items, datamodule.data.item_raw_ids).train()}
    tasks["compiled"] = copy.deepcopy(tasks["eager"])
    compile_stacks(cfg, tasks["compiled"].model)
    optimizers = {mode: optimizer_of(task) for mode, task in tasks.items()}

    def step(mode: str, batch) -> float:
        return train_step_seconds(tasks[mode], optimizers[mode], batch)

    first_call = step("compiled", batches[0])  # the compile (and a step)
    warm = [step("compiled", b) for b in batches[1:]]  # shapes the first batch did not have may recompile
    step("eager", batches[0])
    speed = alternating_medians(step, MODES, batches, rounds)
    return {"s_per_step": speed, "speedup": speed["eager"] / speed["compiled"],
            "first_compiled_call_s": first_call, "warm_up_calls_s": warm,
            "batch_size": int(cfg.data.batch_size), "model_kind": cfg.model.get("kind", "retrieval")}


def main() -> None:
    args = _parse()
    import torch

    from genrec.errors import DataError
    from genrec.utils.provenance import provenance, write_json

    torch.set_num_threads(args.threads)
    prov = provenance()  # the commit at the start: the code that ran, whatever is committed while it runs
    rows, skipped = [], {}
    with tempfile.TemporaryDirectory(prefix="bench_compile-") as tmp:
        for model in args.models:
            experiment = PRESETS[model]
            try:
                row = time_steps(experiment, args.steps, args.rounds, Path(tmp))
            except DataError as e:  # a dataset that is not on this machine
                skipped[model] = str(e).splitlines()[0]
                print(f"{model:8s} skipped: {skipped[model]}", flush=True)
                continue
            rows.append({"model": model, "experiment": experiment, **row})
            s = row["s_per_step"]
            print(f"{model:8s} s/step eager {s['eager']:.4f}  compiled {s['compiled']:.4f}  "
                  f"eager/compiled {row['speedup']:.2f}x  first compiled call {row['first_compiled_call_s']:.1f} s",
                  flush=True)
    payload = {"benchmark": "compile=true vs eager training steps on CPU", "seed": 0,
               "config": {"experiments": {m: PRESETS[m] for m in args.models}, "timed_steps": args.steps,
                          "rounds": args.rounds, "threads": args.threads, "sid_levels": list(SID_LEVELS),
                          "torch": torch.__version__},
               "rows": rows, "skipped": skipped,
               "note": f"{os.cpu_count()}-core machine; steps timed alternating in one process, median of round "
                       "medians; the first compiled call is a cold compile (a fresh inductor cache)", **prov}
    write_json(Path(args.out), payload)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
