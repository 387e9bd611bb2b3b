"""`attnwatch bisect`: the search (search.py), its oracle of same-job compares (runner.py), what
it prints and writes (report.py), and the outcome recorded on an alert (record.py)."""
