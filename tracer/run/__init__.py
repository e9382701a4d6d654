"""Stage 6, the job: recording a dataset to Parquet, in one process or many.

`select` (which cells, gates, steps, sequences), `budget` (the memory budget and the batch
size it allows; imports no TensorFlow), `recording` (`record` and `trace`: the main job),
`parallel` (tasks on a process pool or a Dask cluster), `bar` (progress on stderr; imports no
TensorFlow). May import every stage below.
"""
