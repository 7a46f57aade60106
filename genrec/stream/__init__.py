"""Online learning from an event stream (``genrec-stream``): sources (a folder of event files, Redis Streams, a
dataset replay), the streaming trainer with exactly-once checkpoints, prequential evaluation beside online
baselines, and versioned hot exports. See docs/ARCHITECTURE.md ("Streaming") and genrec/stream/loop.py."""
