"""The commands of `gatetrace`, one module each, on top of every stage (`tracer.cli` assembles them).

Each module holds `NAME`, `HELP`, `EXAMPLE` (the help's epilog: a command that works),
`READS_MODEL` and `RUNS_MODEL` (which of the model's arguments it takes, `common.model_arguments`),
`arguments(parser)`, its own flags, and `run(args)`, which calls the library and prints; and
optionally `OUT_OF_MEMORY`, what `gatetrace` advises after a MemoryError (only what works for
that command: by default, to close other programs and run it again).
`record_runs` holds what `record` does beyond one recording in
this process (a checkpoint series, workers) and the lines it prints when done.
"""
