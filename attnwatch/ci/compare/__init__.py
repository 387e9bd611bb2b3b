"""`attnwatch compare`: same-job A/B of a pull request's merge base against its head."""
