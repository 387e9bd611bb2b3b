"""The one measuring engine: builds, checks and times the cases of a plan in one process.

Both measuring processes run it: the pytest child of `attnwatch run` (ci/suites/worker.py,
results journalled to a file) and the long-lived compare worker (ci/workers/server.py,
results sent over a pipe). They differ only in how events leave the process and in what asks
for a measurement; the engine decides everything else alike for both.

Modules: `events` (the event vocabulary both channels carry, the stage names, the crash exit
code), `rounds` (what every measurement call renews: inputs' seeds, the placement spacer,
tuned launch choices), `group` (the engine: builds, stages, interleaved timing, graph
replay, derived metrics, the isolated re-run).
"""
