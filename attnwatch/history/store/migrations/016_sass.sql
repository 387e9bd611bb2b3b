-- The static code of the kernel binaries a run profiled (bundle sass.json, history/contract/sass_file.py),
-- so that a stored alert's cause names what changed in the code the GPU ran, as a compare's does
-- (history/detection/ncu_cause.py diffs the two runs around a step with history.analysis.sass_diff).
--
-- A binary is stored once, by its sha256: runs that ran the same binary share its rows.
-- `sass_kernels`: each kernel of a binary, its loop count and static resources (NULL: not printed);
-- `sass_mix`: its instructions by opcode and place ('in a loop' or 'outside loops'), NOPs left out;
-- `run_binaries`: which binaries each variant of a run ran. A run without rows here (a CPU run,
-- a bundle from before sass.json) has no static code: its causes read without it.
CREATE TABLE sass_kernels (
    digest      VARCHAR NOT NULL,
    kernel_name VARCHAR NOT NULL,
    loops       INTEGER NOT NULL,
    registers   INTEGER,
    stack       INTEGER,
    shared      INTEGER,
    local       INTEGER,
    PRIMARY KEY (digest, kernel_name)
);

CREATE TABLE sass_mix (
    digest      VARCHAR NOT NULL,
    kernel_name VARCHAR NOT NULL,
    opcode      VARCHAR NOT NULL,
    place       VARCHAR NOT NULL,
    count       INTEGER NOT NULL,
    PRIMARY KEY (digest, kernel_name, opcode, place)
);

CREATE TABLE run_binaries (
    run_id  VARCHAR NOT NULL,
    variant VARCHAR NOT NULL,
    digest  VARCHAR NOT NULL,
    PRIMARY KEY (run_id, variant, digest)
);
