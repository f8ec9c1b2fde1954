"""Experiments made of several runs: a sweep of recipes launched as one job array (`sweep`) and
the warm-vs-cold frontier over vocabulary sizes and budgets (`frontier`). They drive the pipeline
(`langadapt.pipeline`) and read the runs it leaves; nothing below imports them."""
