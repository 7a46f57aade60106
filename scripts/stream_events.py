"""Write a dataset's events, in timestamp order, as a stream genrec-stream can read: a folder of event files or a
Redis stream. Any data preset works (the synthetic default needs no download).

    python scripts/stream_events.py --out stream-in                       # synthetic default -> stream-in/*.parquet
    python scripts/stream_events.py --data ml100k --format jsonl --out stream-in
    python scripts/stream_events.py --redis redis://localhost:6379/0 --stream genrec-events

then ``genrec-stream source.path=stream-in`` (or ``source=redis source.stream=genrec-events``). Events get the IDs
``<dataset>:<row of the log>`` and the default field names of ``stream.schema`` (event_id, user_id, item_id,
timestamp).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from genrec.conf import compose_config  # noqa: E402
from genrec.data.datamodule import read_log  # noqa: E402
from genrec.stream.files import write_event_files  # noqa: E402
from genrec.stream.replay import event_frame  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="synthetic", help="a data preset (genrec/conf/data)")
    parser.add_argument("--override", action="append", default=[], help="a data override, e.g. data.reader.seed=1")
    parser.add_argument("--out", help="folder of event files to write")
    parser.add_argument("--format", default="parquet", choices=["parquet", "csv", "jsonl"])
    parser.add_argument("--rows-per-file", type=int, default=10000)
    parser.add_argument("--redis", help="a Redis URL to XADD the events to instead")
    parser.add_argument("--stream", default="genrec-events", help="the Redis stream's key")
    parser.add_argument("--limit", type=int, help="only the first N events")
    args = parser.parse_args()
    if bool(args.out) == bool(args.redis):
        parser.error("give one of --out (event files) or --redis (a Redis stream)")
    cfg = compose_config("stream", overrides=[f"data={args.data}", *args.override])
    frame = event_frame(read_log(cfg.data.reader))
    if args.limit:
        frame = frame.iloc[:args.limit]
    if args.out:
        paths = write_event_files(frame, args.out, args.rows_per_file, args.format)
        print(f"wrote {len(frame)} events of {args.data} in {len(paths)} {args.format} files to {args.out}")
    else:
        import redis

        from genrec.stream.redis_streams import publish

        count = publish(redis.Redis.from_url(args.redis), args.stream, frame)
        print(f"added {count} events of {args.data} to the Redis stream {args.stream} at {args.redis}")


if __name__ == "__main__":
    main()
