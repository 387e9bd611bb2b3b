"""The PR comment and job summary rendered from a validated compare.json."""
