"""The history: the bundle contract, pure analysis, the store, ingest, SQL and detection.

Subpackages by role (docs/design.md, "Layers and the direction of imports"): `contract` and
`analysis` are pure and are all that `ci` uses outside its command line; `store`, `ingest`,
`sql` and `detection` work on a history. `history` imports nothing else of this project.
"""
