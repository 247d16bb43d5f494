"""Where the suite finds its session: set by run_in_job.py (in-job), or made by conftest.py from
DISCO_TEST_SERVER (a served job)."""

SESSION = None
MODE = None  # "in-job" or "remote"
