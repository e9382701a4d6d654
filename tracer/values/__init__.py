"""Stage 5, the values: every gate, state and weight of the cells found, from one run per batch.

`running` (a `Session.run` that Ctrl-C and a time limit can stop), `replay` (a loop's cell
recomputed in numpy and checked against the loop's outputs), `fused` (a fused op's
values), `weights` (per-gate W, U, b), `fetch` (`FetchPlan`: the one-run fetch of a graph),
`keras` (`KerasPlan`: a Keras model's layers captured in one call and replayed). May import
`tracer.find`, `tracer.load`, `tracer.inputs`, `tracer.cells` and `tracer._tf`.
"""
