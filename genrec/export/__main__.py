"""``python -m genrec.export run_dir=...``: the same as ``genrec-export``."""
from genrec.export.cli import main

main()
