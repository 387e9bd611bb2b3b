"""`attnwatch bisect`: the search (search.py), its oracle of same-job compares (runner.py), and
what it prints and writes (report.py). The alert side (the range an alert names, the outcome
recorded on it) is history.detection.bisects."""
