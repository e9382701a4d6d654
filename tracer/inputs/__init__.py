"""Stage 2, the data: input files read by rows, and the feeds they make.

`rows` (the row-slicing base every reader shares, and reaching files locally or in object
storage), `files` (`.npy`, `.npz` members, Parquet columns and folders), `tfrecords`
(TFRecord features, CRCs checked), `feeds` (`--feed` values resolved to placeholders and
cut into batches). May import `tracer.cells` and `tracer._tf`.
"""
