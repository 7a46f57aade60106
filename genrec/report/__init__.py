"""``genrec-report <run> [<run> ...]``: one self-contained HTML page per run or comparison of runs — training
curves, throughput and memory (telemetry), evaluation breakdowns, tokenizer health of runs over semantic IDs, and
the config diff between runs. :mod:`genrec.report.collect` reads run folders as data, :mod:`genrec.report.html`
writes the page, ``report.js`` draws its charts as inline SVG in the browser.
"""
