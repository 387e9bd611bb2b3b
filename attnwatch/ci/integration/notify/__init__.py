"""Alert notifications: lifecycle events posted to a webhook and kept as GitHub issues."""
