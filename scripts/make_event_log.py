"""Write the synthetic event log of the out-of-core benchmark (genrec/data/event_log.py) to a Parquet file.

    python scripts/make_event_log.py /tmp/events_100m.parquet --events 100_000_000   # ~1.4 GB, a few minutes
    python scripts/make_event_log.py /tmp/events_1m.parquet --events 1e6 --id-type str

Memory stays at one chunk (``--chunk-size`` events) plus the ID tables, whatever ``--events``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's genrec

from genrec.data.event_log import write_event_log  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--events", type=float, required=True, help="number of events (1e8 and 100_000_000 both work)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--id-type", choices=["int", "str"], default="int")
    p.add_argument("--chunk-size", type=int, default=1_000_000)
    args = p.parse_args()
    started = time.time()
    path = write_event_log(args.out, int(args.events), seed=args.seed, id_type=args.id_type,
                           chunk_size=args.chunk_size)
    print(f"{path}: {int(args.events):,} events, {path.stat().st_size / 2 ** 20:.0f} MiB in "
          f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
