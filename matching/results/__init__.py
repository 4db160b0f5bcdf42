"""A study's results, read back from its run directories (the library behind the `report` command):

- `discovery`: the runs below a folder (finished, failed or never started), each named by task, aligner, variant;
- `scores`: the per-question (or per-example) scores an evaluation writes into a run, and reading them back;
- `significance`: paired tests of one system against another over the same questions;
- `rows`: the report's typed rows and their comparisons with a baseline;
- `tables`: the rows from the runs, the comparison, Markdown, CSV and the questions two rows disagree on;
- `charts`: the rows as a bar chart;
- `study`: the whole report of a study, written and printed.
"""
