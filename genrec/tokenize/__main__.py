"""``python -m genrec.tokenize``: the genrec-tokenize CLI."""
from genrec.tokenize.cli import main

main()
