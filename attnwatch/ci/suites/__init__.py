"""The pytest suites a GPU runner executes in a child process (see ci/supervisor.py).

Run only through `attnwatch run` (or `ci.supervisor.run_suite`), which writes the plan and reads
the journal: `python -m pytest ci/suites --attnwatch-plan PLAN --attnwatch-journal JOURNAL
--benchmark-json OUT.json`.
"""
