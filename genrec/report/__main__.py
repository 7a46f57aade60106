"""``python -m genrec.report``: the same as ``genrec-report``."""
from genrec.report.cli import main

main()
