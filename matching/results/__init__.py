"""A study's results, read back from its run directories (the library behind the `report` command):

- `discovery`: the runs below a folder (finished, failed or never started), each named by task, aligner, variant;
- `scores`: the per-question (or per-example) scores an evaluation writes into a run, and reading them back;
- `significance`: a method against another, seeds and questions counted together (and the conditional test over
  questions alone), Holm over many comparisons, the seeds a difference needs;
- `sequential`: the alpha-spending looks of a study that adds seeds until its comparisons are decided;
- `simulation`: studies with known truth, to measure the tests' calibration and power;
- `rows`: the report's typed rows and their comparisons with a baseline;
- `tables`: the rows from the runs, the comparison, Markdown, CSV and the questions two rows disagree on;
- `charts`: the rows as a bar chart;
- `study`: the whole report of a study, written and printed.
"""
