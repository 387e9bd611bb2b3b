"""Fingerprints of what decides a variant's timed work, so a compare measures only what changed.

`sources`: the files a module's code and data come from (its transitive imports inside the
project, resolved with `ast`; the data files and CUDA headers they name). `variant`: one
variant's fingerprint, computed in the measuring worker of each side (its own revision's
`kernels`, its builds, its libraries). `harness`: the shared measuring code of a checkout,
whose change measures everything. The paths and exclusions are data: `rules.toml`.
"""
