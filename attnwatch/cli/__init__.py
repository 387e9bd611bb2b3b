"""The command line: every `attnwatch …` command, its arguments and its exit status, nothing else.

The top layer. `main` (attnwatch.cli.main) builds the parser from one module per command
(attnwatch.cli.commands), and `top_level` turns every ending into an exit status and at most one
line on stderr. A command module parses its arguments and hands plain values and objects to the
measuring side (attnwatch.ci), the history (attnwatch.history) or the dashboard
(attnwatch.app); nothing below this layer imports it.
"""
