"""attnwatch and the world around a CI job: GitHub, pull-request comments, notifications and the
self-hosted runner's job hooks.

The rest of attnwatch.ci measures (the engine, timing, workers, compare, ncu, bisect); this
package only talks: `github` (a small REST client), `comment` (the sticky PR comment),
`notify` (alert messages to issues and webhooks), `pr_runs` (a compare's bundles as
pull-request runs) and `runner_hooks` (the runner's job-started hook script).
"""
