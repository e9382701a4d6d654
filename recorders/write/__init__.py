"""Writing a recording: what it is on disk, and the writer that makes it.

The format, which readers import too: `layout` (folders, file names, column encodings),
`columns` and `keys` (long-format columns), `schema` (what its JSON files hold), `progress`
(which examples are complete), `folder` (a folder reached only through its handle), `stats`
(summary statistics that merge exactly), `series` (a series folder: one recording per key).
The writer's own parts, which nothing outside this package imports: `writer`
(`RecordingWriter`, `write_weights`: a file's lifecycle, batch by batch), `rowgroups` (a part
file cut into row groups), `plain` (the default layout's part files written from numpy, with
`thrift` for their metadata), `direct` (new files written past the page cache), `swap`
(locks and the `--overwrite` swap), `place` (local folder or object storage), `files` (the
output location). Imports only `recorders.errors` and this package.
"""
