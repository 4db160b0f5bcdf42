"""`hydra/sweeper=job_list`: a sweep of the jobs listed in a file (see job_list_sweeper.py)."""
